"""What Accelerate's memory discovery lacks for the ``neuron`` device, supplied when it loads.

``from_pretrained(..., device_map="auto")`` asks ``accelerate.utils.get_max_memory()`` which
devices exist. Accelerate 1.15 asks one vendor module per device type (``torch.npu``,
``torch.xpu``, ...) and otherwise ``torch.cuda``; it has no branch for ``torch.neuron`` (its
other neuron branches, RNG state and ``dispatch_model``, exist), so every weight would land on
the CPU without a word. The upstream change is one branch in ``get_max_memory``::

    elif is_neuron_available():
        for i in range(torch.neuron.device_count()):
            max_memory[i] = torch.neuron.mem_get_info(i)[0]

Until Accelerate has it, this module wraps ``get_max_memory`` as ``accelerate.utils.modeling``
is imported (before ``accelerate.utils`` and Transformers bind the name) so that the devices
come first, as GPUs do; integer device ids then mean ``neuron:i`` (``torch.device(0)`` is the
current accelerator). ``TORCH_NEURONX_ACCELERATE_MEMORY=0`` leaves Accelerate untouched, and
:func:`install` warns instead. Nothing of Accelerate's files is changed.
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from types import ModuleType
from typing import Callable

import torch

from ..import_hooks import after_import

MODULE = "accelerate.utils.modeling"
ENV = "TORCH_NEURONX_ACCELERATE_MEMORY"


def neuron_max_memory() -> dict[int, int]:
    """Free memory of each neuron device, keyed by its index as Accelerate keys GPUs."""
    return {i: torch.neuron.mem_get_info(i)[0] for i in range(torch.neuron.device_count())}


def with_neuron_devices(get_max_memory: Callable[..., dict], add: bool) -> Callable[..., dict]:
    """``get_max_memory`` that, when asked which devices exist and finding no accelerator while
    neuron cores are available, lists the cores first (``add``) or warns that it left them out."""

    @functools.wraps(get_max_memory)
    def wrapped(max_memory: dict | None = None) -> dict:
        found = get_max_memory(max_memory)
        if max_memory is not None or any(isinstance(k, int) for k in found) or not torch.neuron.is_available():
            return found
        if add:
            return {**neuron_max_memory(), **found}
        warnings.warn(
            f"accelerate.utils.get_max_memory found no neuron device ({ENV}=0 turned off TorchNeuron's "
            "addition), so device_map='auto' places every weight on the CPU; pass device_map='neuron' or "
            "max_memory={0: ..., 'cpu': ...} instead", stacklevel=2)
        return found

    wrapped.__torch_neuronx_wrapped__ = True  # type: ignore[attr-defined]
    return wrapped


def _patch(module: ModuleType) -> None:
    if getattr(module.get_max_memory, "__torch_neuronx_wrapped__", False):
        return
    module.get_max_memory = with_neuron_devices(module.get_max_memory, add=os.environ.get(ENV, "1") != "0")


def install() -> None:
    """Wrap ``get_max_memory`` now if Accelerate is loaded, else when it is."""
    after_import(MODULE, _patch)
    # Names bound before this ran keep the original; rebind the public one.
    utils = sys.modules.get("accelerate.utils")
    if utils is not None and MODULE in sys.modules:
        utils.get_max_memory = sys.modules[MODULE].get_max_memory
