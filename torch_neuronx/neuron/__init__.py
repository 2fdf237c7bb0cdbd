r"""``torch.neuron``: the device module of the neuron backend, with the API of ``torch.cuda``.

Every visible simulated NeuronCore is one device ``neuron:N`` with its own memory pool and
hardware queue. Operations are launched asynchronously; functions that read device state
(:func:`synchronize`, ``tensor.cpu()``, ``tensor.item()``) wait for the queue and raise the
earliest error a kernel reported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _C
from ..runtime import activity as _activity, current_topology as _topology
from ..runtime.devices import device_index as _device_index
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "device_of",
    "get_device_name", "get_device_properties", "get_device_capability", "synchronize", "init",
    "is_initialized", "get_amp_supported_dtype", "is_bf16_supported",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "StreamContext",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "empty_cache", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "memory_summary", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "mem_get_info",
]


def _check_not_forked() -> None:
    if _C._in_bad_fork():
        raise RuntimeError("Cannot re-initialize the NeuronCore runtime in a forked subprocess. To use "
                           "the neuron device with multiprocessing, you must use the 'spawn' start method")


def is_available() -> bool:
    r"""Return whether a neuron device is available (the simulator always provides one)."""
    return device_count() > 0


def device_count() -> int:
    r"""Return the number of visible NeuronCores (see ``NEURON_RT_VISIBLE_CORES``)."""
    return _C._device_count()


def init() -> None:
    r"""Initialize the runtime of the current core. Usually it starts on first use."""
    _check_not_forked()
    _C._init(current_device())


def is_initialized() -> bool:
    r"""Return whether the runtime has started (a core was used)."""
    return _C._is_initialized() and not _C._in_bad_fork()


def current_device() -> int:
    r"""Return the index of the currently selected device."""
    return _C._current_device()


def set_device(device: Any) -> None:
    r"""Set the current device and initialize its runtime, as ``torch.cuda.set_device`` creates
    the device's context: until then PyTorch resolves ``"neuron"`` without an index (fake tensors,
    DTensor's sharding propagation) to ``neuron:0``, not to the selected device."""
    index = _device_index(device)
    if index >= 0:
        _C._set_device(index)
        init()


class device:
    r"""Context manager that changes the selected device.

    Args:
        device (torch.device or int or str): device index to select. A negative index or
            ``None`` is a no-op.
    """

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = current_device()
            _C._set_device(self.idx)

    def __exit__(self, *args: object) -> None:
        if self.idx >= 0:
            _C._set_device(self.prev_idx)


class device_of(device):
    r"""Context manager that selects the device of the given tensor (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if obj.device.type == "neuron" else -1)


def synchronize(device: Any = None) -> None:
    r"""Wait for all kernels on all streams of a device to complete, and raise the earliest
    error one of them reported."""
    _check_not_forked()
    _C._synchronize(_device_index(device))


def _drain_at_exit() -> None:
    """Wait for every core's queued kernels before the interpreter finalizes: a Python kernel
    (a compiled graph, an nki kernel) still queued would need the interpreter while it shuts
    down, which kills the core's worker thread mid-kernel."""
    if is_initialized():
        for index in range(device_count()):
            _C._synchronize(index)


@dataclass(frozen=True)
class _NeuronDeviceProperties:
    name: str
    total_memory: int
    chip_generation: str
    logical_nc_config: int
    physical_cores_per_device: int
    chip_index: int
    core_index: int
    is_simulated: bool = True

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1 << 20)}MB, "
                f"chip={self.chip_index}, core={self.core_index}, logical_nc_config={self.logical_nc_config})")


def get_device_properties(device: Any = None) -> _NeuronDeviceProperties:
    r"""Return the properties of a device: name, ``total_memory`` (HBM capacity in bytes) and
    where the logical core sits on the simulated chips."""
    index = _device_index(device)
    if not 0 <= index < device_count():
        raise AssertionError(f"Invalid device id {index}: {device_count()} neuron devices are visible")
    topo = _topology()
    core = topo.visible_cores[index]
    return _NeuronDeviceProperties(
        name=get_device_name(index), total_memory=topo.hbm_bytes_per_core,
        chip_generation=topo.generation, logical_nc_config=topo.logical_nc_config,
        physical_cores_per_device=topo.logical_nc_config,
        chip_index=core // topo.cores_per_chip, core_index=core)


def get_device_name(device: Any = None) -> str:
    r"""Return the name of a device, e.g. ``"NeuronCore (simulated trn2, LNC=2)"``."""
    _device_index(device)
    topo = _topology()
    return f"NeuronCore (simulated {topo.generation}, LNC={topo.logical_nc_config})"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    r"""Return the chip generation as a (major, minor) pair: (2, 0) for trn2, (3, 0) for trn3."""
    _device_index(device)
    return (int(_topology().generation[-1]), 0)


def get_amp_supported_dtype() -> list[torch.dtype]:
    r"""Return the dtypes ``torch.autocast("neuron")`` can cast to."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    r"""Return True: NeuronCores compute natively in bfloat16."""
    return True


def _is_in_bad_fork() -> bool:
    return _C._in_bad_fork()


def _lazy_init() -> None:
    # PyTorch calls this before the first operator on a neuron device: operator tracking starts
    # here so that it sees that operator too, and not earlier (programs that never use the
    # device do not run its observer). The same holds for the thread that publishes the
    # process's activity to neuron-ls/neuron-top.
    _check_not_forked()
    _C._start_op_tracking()
    _activity.start(_topology().visible_cores)
