"""A Diffusers pipeline (DDPM with a tiny UNet) denoises on `neuron` as on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

diffusers = pytest.importorskip("diffusers")


def pipeline():
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                                 block_out_channels=(16, 32), norm_num_groups=8,
                                 down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    return diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler(num_train_timesteps=50))


def test_ddpm_pipeline_gives_the_cpu_images():
    def images(device: str) -> np.ndarray:
        pipe = pipeline().to(device)
        assert pipe.device.type == device
        # The noise comes from a CPU generator on both, as Diffusers' examples seed it.
        return pipe(batch_size=2, num_inference_steps=4, generator=torch.Generator().manual_seed(3),
                    output_type="np").images

    cpu, device = images("cpu"), images("neuron")
    assert device.shape == cpu.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(device, cpu, rtol=1e-4, atol=1e-4)
    assert np.abs(cpu - 0.5).max() > 0.1  # the images are not a constant
