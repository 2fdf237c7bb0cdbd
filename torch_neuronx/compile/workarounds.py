"""Where PyTorch offers no hook for a device outside its own list, the one place the backend
changes a PyTorch function. Each change affects neuron inputs only (every other input takes
PyTorch's own path unchanged, tested in ``tests/compile/test_workarounds.py``), names the
function and the PyTorch version it was written against, and is applied when PyTorch imports the
module it changes (``install``, an import hook), so that importing the package imports nothing more.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import torch

from ..import_hooks import after_import

FLEX_ATTENTION = "torch.nn.attention.flex_attention"


def accept_neuron_flex_attention(module: ModuleType | None = None) -> None:
    """``torch.nn.attention.flex_attention._validate_device`` (PyTorch 2.13) refuses devices
    outside a fixed list (and CPU inputs that require grad) before any backend sees the call,
    and Dynamo traces that check, so a compiled neuron FlexAttention would never reach the
    backend. Neuron inputs skip the check (the backend lowers FlexAttention for the device, see
    ``flex_attention.py``); every other device calls PyTorch's function."""
    module = module or importlib.import_module(FLEX_ATTENTION)  # not the function of that name
    original = module._validate_device
    if getattr(original, "accepts_neuron", False):
        return

    def validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != "neuron":
            original(query, key, value)

    validate_device.accepts_neuron = True  # type: ignore[attr-defined]
    module._validate_device = validate_device


def apply() -> None:
    """Every workaround now, idempotent."""
    accept_neuron_flex_attention()


def install() -> None:
    """Every workaround when (if ever) PyTorch imports the module it changes: eager calls and
    graphs compiled with any backend see them."""
    after_import(FLEX_ATTENTION, accept_neuron_flex_attention)
