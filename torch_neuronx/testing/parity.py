"""Parity check: run the same training loop on two devices and compare losses and weights.

A job that starts on a device is not the same as a job that gives the same result; these
helpers run the unchanged user training loop step by step so the results can be compared
with a CPU reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

_EPS = 1e-12


def train(
    model_fn: Callable[[], nn.Module],
    batches: Sequence[tuple[Tensor, Tensor]],
    device: str | torch.device,
    steps: int,
    lr: float = 1e-3,
    seed: int = 0,
) -> tuple[list[float], dict[str, Tensor]]:
    """Train ``model_fn()`` on ``device`` for ``steps`` steps with AdamW.

    The model is built on the CPU after ``torch.manual_seed(seed)`` so every device starts from
    the same weights, then moved with ``.to(device)``. Batches are reused cyclically if there
    are fewer than ``steps``; the model must return ``(output, loss)`` from ``model(x, y)``.
    Returns the per-step losses and the final state dict copied to the CPU.
    """
    torch.manual_seed(seed)
    model = model_fn().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad()
        loss = model(x.to(device), y.to(device))[1]
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    state = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}
    return losses, state



def compare_losses(a: Sequence[float], b: Sequence[float]) -> float:
    """Maximum over steps of ``|a - b| / |b|`` (``b`` is the reference)."""
    if len(a) != len(b):
        raise ValueError(f"loss curves differ in length: {len(a)} vs {len(b)}")
    return max((abs(x - y) / max(abs(y), _EPS) for x, y in zip(a, b)), default=0.0)


def max_rel_diff_state(sd_a: dict[str, Tensor], sd_b: dict[str, Tensor]) -> float:
    """Maximum over tensors of ``max|a - b| / max|b|`` (``sd_b`` is the reference).

    Each tensor's error is scaled by the tensor's largest magnitude rather than element by
    element, so weights that are close to zero do not inflate the result.
    """
    if sd_a.keys() != sd_b.keys():
        raise ValueError(f"state dicts differ in keys: {sorted(sd_a.keys() ^ sd_b.keys())}")
    worst = 0.0
    for name, b in sd_b.items():
        a = sd_a[name].to(device="cpu", dtype=torch.float64)
        b = b.to(device="cpu", dtype=torch.float64)
        if a.shape != b.shape:
            raise ValueError(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
        if b.numel():
            scale = max(b.abs().max().item(), _EPS)
            worst = max(worst, (a - b).abs().max().item() / scale)
    return worst
