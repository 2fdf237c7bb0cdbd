"""Profile a few training steps on the simulated device and open them in Neuron Explorer.

    python examples/explorer_profile.py [PROFILE_DIR]     # records, then prints the command below
    neuron-explorer view -d PROFILE_DIR                   # the web UI on a loopback port

The step has what the Explorer views are for: module code (a small MLP with LayerNorm), a
kernel-language kernel (an NKI scaling op), a compiled graph, a CPU fallback (a float64 op) and a
host sync per step (``loss.item()``).
"""
from __future__ import annotations

import sys
import tempfile

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

import nki
import nki.language as nl
import torch_neuronx
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler


@nki.jit
def scale_kernel(x, out):
    tile = nl.load(x[0:x.shape[0], 0:x.shape[1]])
    nl.store(out[0:x.shape[0], 0:x.shape[1]], value=nl.multiply(tile, 0.5))
    return out


@torch_neuronx.nki_op("explorer_example::scale", mutates_args={})
def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_kernel(x, out)
    return out


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, width: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(width) for _ in range(depth)))
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def record(output_dir: str, steps: int = 3) -> str:
    """Records ``steps`` training steps into ``output_dir``; returns the profile directory."""
    torch.manual_seed(0)
    model = Model().to("neuron")
    gelu = torch.compile(nn.functional.gelu, backend="neuron")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, target = torch.randn(32, 64, device="neuron"), torch.randn(32, 64, device="neuron")

    def step() -> float:
        out = gelu(model(x))
        loss = nn.functional.mse_loss(out, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        halved = scale(out.detach())  # the kernel-language kernel
        spread = halved.double().std()  # float64: runs on the host (a CPU fallback)
        return loss.item() + spread.item()  # .item(): the host waits for the device

    step()  # compile and warm up outside the profile
    config = NeuronConfig(profile_output_dir=output_dir)
    exporter = NeuronProfiler(config)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config,
                 schedule=schedule(wait=0, warmup=0, active=steps, repeat=1), on_trace_ready=exporter.export_trace,
                 with_stack=True) as prof:
        for _ in range(steps):
            step()
            prof.step()
    assert exporter.last_output_dir is not None
    return str(exporter.last_output_dir)


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="neuron-profile-")
    profile_dir = record(where)
    print(f"profile written to {profile_dir}\nopen it: neuron-explorer view -d {where}")
