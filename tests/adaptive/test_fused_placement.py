"""Where adaptive eager's fused kernels run (torch_neuronx.adaptive.set_fused_placement): on the
core's worker, on the program thread, or chosen by timing the program's loop both ways. The
placement changes which thread computes, never the values."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_neuronx
from helpers import assert_import_setting
from torch_neuronx.adaptive import get_fused_placement, segments, set_fused_placement
from torch_neuronx.runtime import kernel_counts


@pytest.fixture
def placement():
    """Restores the placement setting after the test."""
    before = get_fused_placement()
    yield set_fused_placement
    set_fused_placement(before)


def trainer(device: str, blocks: int = 1):
    """A training step of a small MLP of identical blocks with AdamW on ``device`` (same seed on
    every device), returning its loss; on the device, the background compiles finish before each
    step so the loop settles early."""
    torch.manual_seed(0)
    layers = [m for _ in range(blocks) for m in (nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16))]
    model = nn.Sequential(*layers, nn.Linear(16, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(device)

    def step() -> float:
        if device != "cpu":
            segments.wait_for_compiles()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return step


def training_run(device: str, steps: int, blocks: int = 1) -> list[float]:
    step = trainer(device, blocks)
    return [step() for _ in range(steps)]


@pytest.mark.parametrize("where", ["worker", "program"])
def test_fused_kernels_run_where_placed_and_match_cpu(adaptive, placement, where):
    placement(where)
    expected = training_run("cpu", 16)
    step = trainer("neuron")
    losses = [step() for _ in range(10)]  # fused from the third step on
    before, fused_before = kernel_counts(), torch_neuronx.get_adaptive_metrics()["fused_launches"]
    losses += [step() for _ in range(6)]
    fused = torch_neuronx.get_adaptive_metrics()["fused_launches"] - fused_before
    ran = {k: v - before[k] for k, v in kernel_counts().items()}
    torch.testing.assert_close(losses, expected)
    # On the program thread, the eager kernels between fused ones follow them there; on the
    # worker, only the loss.item() reads run on the program thread (the core is idle then).
    assert fused >= 6 and (ran["host"] >= fused and ran["worker"] == 0 if where == "program"
                           else ran["worker"] >= fused and ran["host"] <= 6), (fused, ran)
    states = torch_neuronx.get_adaptive_metrics()["fused_placement"]
    assert {s["state"] for s in states.values()} == {"worker" if where == "worker" else "program thread"}


def test_auto_finds_the_loop_times_both_placements_and_keeps_one(adaptive, placement):
    placement("auto")
    steps = 120  # warm-up, 24+ launches to find the loop, 32 iterations of timing
    # Identical blocks launch the same fused kernels several times a step: the loop is the step.
    expected = training_run("cpu", steps + 1, blocks=3)
    step = trainer("neuron", blocks=3)
    losses = [step() for _ in range(steps)]
    (state,) = torch_neuronx.get_adaptive_metrics()["fused_placement"].values()
    assert state["state"] in ("worker", "program thread") and state["program_vs_worker"] > 0, state
    # The loop found is one training step: the fused launches of a step.
    before = torch_neuronx.get_adaptive_metrics()["fused_launches"]
    losses.append(step())
    assert torch_neuronx.get_adaptive_metrics()["fused_launches"] - before == state["loop_launches"], state
    torch.testing.assert_close(losses, expected)


def test_the_setting_and_its_environment_variable():
    before = get_fused_placement()
    with pytest.raises(ValueError, match="placement must be one of"):
        set_fused_placement("gpu")
    assert get_fused_placement() == before
    show = "import torch_neuronx.adaptive as a; print(a.get_fused_placement())"
    assert_import_setting("TORCH_NEURONX_ADAPTIVE_PLACEMENT", show, "auto", "program", "fastest")
