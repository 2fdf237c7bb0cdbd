"""Where PyTorch offers no hook for a device outside its own list, the one place the backend
changes a PyTorch function. Each change affects neuron inputs only (every other input takes
PyTorch's own path unchanged, tested in ``tests/compile/test_workarounds.py``), names the
function and the PyTorch version it was written against, and is applied when Dynamo imports the
backend (``torch.compile(..., backend="neuron")``), never when the package is imported.
"""
from __future__ import annotations

import importlib

import torch


def accept_neuron_flex_attention() -> None:
    """``torch.nn.attention.flex_attention._validate_device`` (PyTorch 2.13) refuses devices
    outside a fixed list (and CPU inputs that require grad) before any backend sees the call,
    and Dynamo traces that check, so a compiled neuron FlexAttention would never reach the
    backend. Neuron inputs skip the check (the backend lowers FlexAttention for the device, see
    ``flex_attention.py``); every other device calls PyTorch's function."""
    module = importlib.import_module("torch.nn.attention.flex_attention")  # not the function
    original = module._validate_device
    if getattr(original, "accepts_neuron", False):
        return

    def validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != "neuron":
            original(query, key, value)

    validate_device.accepts_neuron = True  # type: ignore[attr-defined]
    module._validate_device = validate_device


def apply() -> None:
    """Every workaround, idempotent."""
    accept_neuron_flex_attention()
