"""Distributed training on ``neuron``: the ``neuron`` c10d backend.

Importing the package (which ``import torch`` does) registers the backend, so
``dist.init_process_group(backend="neuron")`` (or ``"cpu:gloo,neuron:neuron"``, or no backend
named with neuron tensors) works unchanged under ``torchrun``. See docs/distributed.md.
"""
from __future__ import annotations

import torch.distributed as dist

from ..runtime.devices import DEVICE_TYPE
from .process_group import NeuronProcessGroup, create
from .work import NeuronWork


def register() -> None:
    """Register the ``neuron`` backend for the ``neuron`` device type (idempotent)."""
    if not dist.is_available() or "NEURON" in dist.Backend._plugins:
        return
    dist.Backend.register_backend(DEVICE_TYPE, create, extended_api=True, devices=[DEVICE_TYPE])


__all__ = ["NeuronProcessGroup", "NeuronWork", "register"]
