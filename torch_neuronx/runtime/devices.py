"""Which core a device argument names: the one parser of ``None`` / int / str / torch.device
that the device module and the runtime helpers share."""
from __future__ import annotations

from typing import Any

import torch

from .. import _C

DEVICE_TYPE = "neuron"  # the name PyTorch knows the device by (PrivateUse1 renamed)


def device_index(device: Any = None) -> int:
    """Index of a neuron device given as ``None`` (the current one), int, str or torch.device."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != DEVICE_TYPE:
        raise ValueError(f"Expected a neuron device, but got: {device}")
    return _C._current_device() if device.index is None else device.index
