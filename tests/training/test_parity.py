"""The README's training loop, unchanged, on neuron against the CPU: loss curves and weights."""
import torch
from torch import nn

import torch_neuronx
from torch_neuronx.testing.parity import compare_losses, max_rel_diff_state, train
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches


def test_tiny_gpt_adamw_50_steps_matches_cpu():
    batches = make_batches(8, 8, 64, 256, seed=0)
    torch_neuronx.clear_op_tracking()
    cpu_losses, cpu_state = train(lambda: TinyGPT(GPTConfig()), batches, "cpu", steps=50)
    dev_losses, dev_state = train(lambda: TinyGPT(GPTConfig()), batches, "neuron", steps=50)
    assert cpu_losses[-1] < cpu_losses[0] - 0.5  # the loop really trains
    assert compare_losses(dev_losses, cpu_losses) <= 1e-5
    # Eager runs the CPU's kernels; adaptive eager's fused optimizer steps round as compiled code
    # does (tests/compile/test_backend.py allows the same after training).
    state_tolerance = 5e-3 if torch_neuronx.get_eager_mode() == "adaptive" else 1e-5
    assert max_rel_diff_state(dev_state, cpu_state) <= state_tolerance
    # Everything a transformer step needs runs on the device.
    assert torch_neuronx.get_fallback_ops() == {}
    executed = torch_neuronx.get_executed_ops()
    for op in ("aten::mm", "aten::bmm", "aten::native_layer_norm_backward", "aten::_softmax",
               "aten::embedding_dense_backward", "aten::nll_loss_forward", "aten::gelu_backward"):
        assert executed.get(op, 0) > 0, op


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, groups=2), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
            nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x, y):
        logits = self.body(x)
        return logits, nn.functional.cross_entropy(logits, y)


def test_cnn_training_matches_cpu():
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, 16, 16, generator=gen), torch.randint(0, 10, (4,), generator=gen))
               for _ in range(4)]
    torch_neuronx.clear_op_tracking()
    cpu_losses, cpu_state = train(SmallCNN, batches, "cpu", steps=12)
    dev_losses, dev_state = train(SmallCNN, batches, "neuron", steps=12)
    assert compare_losses(dev_losses, cpu_losses) <= 1e-5
    assert max_rel_diff_state(dev_state, cpu_state) <= 1e-5
    assert torch_neuronx.get_fallback_ops() == {}
    executed = torch_neuronx.get_executed_ops()
    for op in ("aten::convolution_overrideable", "aten::convolution_backward_overrideable",
               "aten::native_batch_norm", "aten::max_pool2d_with_indices"):
        assert executed.get(op, 0) > 0, op
