"""What TorchAO's float8 hardware check lacks for the ``neuron`` device, supplied when it loads.

``quantize_(model, Float8DynamicActivationFloat8WeightConfig(...))`` asserts
``torchao.float8.inference._check_hardware_support``: float8 matmuls only on CUDA >= 8.9,
MI300/MI350 or XPU (Intel's backend got its branch upstream). Trainium2/3 TensorE multiplies
float8 (``torch._scaled_mm`` runs on the device, dequantizing on every host: docs/low-precision.md),
so the upstream change is one more accepted device::

    assert torch.xpu.is_available() or torch.neuron.is_available() or (...)

Until TorchAO has it, this module wraps ``_check_hardware_support`` as
``torchao.float8.inference`` is imported (before ``torchao.quantization.quant_api`` binds the
name): with neuron devices available it accepts what it accepts for XPU, otherwise it asks the
original. Like the XPU branch, the check is about the machine, not the model's device. Nothing of
TorchAO's files is changed.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType

import torch

from ..import_hooks import after_import

MODULE = "torchao.float8.inference"


def with_neuron(check: Callable[..., None]) -> Callable[..., None]:
    """``_check_hardware_support`` that accepts every granularity when neuron devices exist."""

    @functools.wraps(check)
    def wrapped(granularities, *args, **kwargs) -> None:
        if torch.neuron.is_available():
            return None
        return check(granularities, *args, **kwargs)

    wrapped.__torch_neuronx_wrapped__ = True  # type: ignore[attr-defined]
    return wrapped


def _patch(module: ModuleType) -> None:
    check = getattr(module, "_check_hardware_support", None)
    if check is not None and not getattr(check, "__torch_neuronx_wrapped__", False):
        module._check_hardware_support = with_neuron(check)


def install() -> None:
    """Wrap the check once ``torchao.float8.inference`` is imported (now, if it already is)."""
    after_import(MODULE, _patch)
