"""Kernel-language kernels on the neuron device (the layer above torch_neuronx).

Calling an ``@nki.jit`` kernel with neuron tensors launches it on the current stream of their
core: on the core's worker it runs the kernel simulator on NumPy views of device memory. Like an
eager operator, the first launch of a signature (kernel, grid, argument shapes/strides/dtypes)
waits, so the kernel's result structure (which arguments it returns, or the shape and dtype of
HBM tensors it allocates and returns) is known; later launches return at once, and errors
surface at the next synchronization point, naming the kernel and its source line.
"""
from __future__ import annotations

import collections
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

from torch_neuronx import _C
from torch_neuronx.ops.custom_op import read_only_storages
from torch_neuronx.runtime.devices import DEVICE_TYPE

from . import launchers, simulator
from .jit import numpy_dtype, to_numpy, torch_dtype
from .simulator import distributed_job


def numpy_view(host: torch.Tensor, writable: bool) -> np.ndarray:
    """A NumPy array over the same bytes as a CPU tensor (read-only unless `writable`)."""
    array = to_numpy(host)
    if not writable:
        array.flags.writeable = False
    return array


@dataclass(frozen=True)
class _Result:
    """Where each array the kernel returns comes from: an argument, or a new HBM tensor."""

    kind: str  # "arg", "new", "none", "value"
    index: int = -1
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    value: Any = None


MAX_SIGNATURES_PER_KERNEL = 64
# The result structure of each kernel per call signature. Held weakly by the kernel (a collected
# kernel's id may be reused by another one) and bounded per kernel: shapes that keep changing
# push out the least recently used.
_results: weakref.WeakKeyDictionary[Any, collections.OrderedDict[tuple, Any]] = weakref.WeakKeyDictionary()
_results_lock = threading.Lock()


def _known_result(kernel: Any, key: tuple) -> Any:
    with _results_lock:
        known = _results.get(kernel)
        if known is None or key not in known:
            return None
        known.move_to_end(key)
        return known[key]


def _remember_result(kernel: Any, key: tuple, spec: Any) -> None:
    with _results_lock:
        known = _results.setdefault(kernel, collections.OrderedDict())
        known[key] = spec
        known.move_to_end(key)
        while len(known) > MAX_SIGNATURES_PER_KERNEL:
            known.popitem(last=False)


@dataclass(frozen=True)
class LaunchReport:
    """The simulator's report of one kernel launch, with the core and the Unix-ns interval it ran in."""

    kernel: str  # "nki:<kernel name>", the name of the launch on the hardware queue
    device: int
    start_ns: int
    end_ns: int
    report: simulator.RunReport


MAX_KEPT_INSTRUCTIONS = 1_000_000
# Reports of the launches made while a torch profiler records, for profiling tools to attribute
# instructions to each recorded launch; empty when nobody profiles. Bounded by the instructions
# they hold (a report keeps every instruction, so a count of reports bounds nothing): the oldest
# reports go first.
_launch_reports: collections.deque[LaunchReport] = collections.deque()
_kept_instructions = 0
_launch_reports_lock = threading.Lock()


def _keep_report(report: LaunchReport) -> None:
    global _kept_instructions
    with _launch_reports_lock:
        _launch_reports.append(report)
        _kept_instructions += report.report.instruction_count
        while _kept_instructions > MAX_KEPT_INSTRUCTIONS and len(_launch_reports) > 1:
            _kept_instructions -= _launch_reports.popleft().report.instruction_count


def launch_reports(start_ns: int, end_ns: int) -> list[LaunchReport]:
    """The kept launch reports whose kernel ran within ``[start_ns, end_ns]`` (Unix ns)."""
    with _launch_reports_lock:
        kept = list(_launch_reports)
    return [r for r in kept if start_ns <= r.start_ns and r.end_ns <= end_ns]


def _sizes(values: Any) -> tuple[int, ...]:
    # Fake tensors under dynamic shapes carry SymInts: their example values stand for them.
    return tuple(optimization_hint(v) for v in values)


def _signature(flat: list[Any], grid: tuple[int, ...]) -> tuple:
    parts: list[Any] = [grid]
    for a in flat:
        if isinstance(a, torch.Tensor):
            parts.append((a.dtype, _sizes(a.shape), _sizes(a.stride())))
        else:
            parts.append(repr(a))
    return tuple(parts)


def _describe(result: Any, arrays: list[np.ndarray | None]) -> Any:
    """Record the structure of a kernel's return value."""
    if isinstance(result, (tuple, list)):
        return tuple(_describe(r, arrays) for r in result)
    if result is None:
        return _Result("none")
    if isinstance(result, np.ndarray):
        for i, a in enumerate(arrays):
            if a is not None and result is a:
                return _Result("arg", index=i)
        return _Result("new", shape=tuple(result.shape), dtype=torch_dtype(result.dtype))
    return _Result("value", value=result)


def _materialize(spec: Any, tensors: list[Any], device: torch.device) -> Any:
    """The torch result of a launch: arguments, or new device tensors to be filled."""
    if isinstance(spec, tuple):
        return tuple(_materialize(s, tensors, device) for s in spec)
    if spec.kind == "arg":
        return tensors[spec.index]
    if spec.kind == "new":
        return torch.empty(spec.shape, dtype=spec.dtype, device=device)
    return spec.value if spec.kind == "value" else None


def _fill(result: Any, outputs: Any) -> None:
    """Copy the new HBM arrays a kernel returned into their device tensors (on the worker)."""
    if isinstance(result, (tuple, list)):
        for r, o in zip(result, outputs):
            _fill(r, o)
    elif isinstance(result, np.ndarray) and isinstance(outputs, torch.Tensor):
        target = numpy_view(_C._host_alias(outputs), writable=True)
        if target is not result:
            np.copyto(target, result, casting="unsafe")


def launch(kernel: Any, args: tuple, kwargs: dict, grid: tuple[int, ...]) -> Any:
    """The neuron device's launcher (``nki.launchers.device_launchers``): run ``kernel`` on the core
    of its neuron tensors."""
    names = list(kwargs)
    flat = [*args, *kwargs.values()]
    tensors = [a for a in flat if isinstance(a, torch.Tensor)]
    devices = {t.device for t in tensors}
    if len(devices) != 1 or next(iter(devices)).type != DEVICE_TYPE:
        raise RuntimeError(f"nki kernel '{kernel.__name__}': all tensor arguments must be on one neuron "
                           f"device (got {sorted(map(str, devices))}); move them with .to('neuron')")
    device = next(iter(devices))
    key = _signature(flat, grid)
    spec = _known_result(kernel, key)

    read_only = read_only_storages.get()
    hosts = [_C._host_alias(a) if isinstance(a, torch.Tensor) else None for a in flat]
    writable = [isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in read_only
                for a in flat]
    outputs = None if spec is None else _materialize(spec, flat, device)
    recorded: list[Any] = []
    name = f"nki:{kernel.__name__}"
    index = device.index if device.index is not None else torch.neuron.current_device()
    keep_report = torch._C._autograd._profiler_enabled()

    def body() -> None:
        views = [numpy_view(h, w) if h is not None else a for h, w, a in zip(hosts, writable, flat)]
        positional, named = views[:len(args)], dict(zip(names, views[len(args):]))
        start = time.time_ns()
        result, report = simulator.run(kernel, positional, named, grid)
        if keep_report:
            _keep_report(LaunchReport(name, index, start, time.time_ns(), report))
        if outputs is None:
            recorded.append(_describe(result, [v if isinstance(v, np.ndarray) else None for v in views]))
            recorded.append(result)
        else:
            _fill(result, outputs)

    if outputs is not None:
        _C._launch_python_kernel(index, body, name, wait=False)
        return outputs
    _C._launch_python_kernel(index, body, name, wait=True)
    spec, result = recorded
    _remember_result(kernel, key, spec)
    outputs = _materialize(spec, flat, device)
    _fill(result, outputs)  # fresh tensors no queued kernel knows of: safe to write from here
    return outputs


def fake_launch(kernel: Any, args: tuple, kwargs: dict, grid: tuple[int, ...]) -> Any:
    """A kernel call on fake or meta tensors (fake implementations, tracing): results of the
    right shapes, dtypes and aliasing, without running anything."""
    flat = [*args, *kwargs.values()]
    device = next(a.device for a in flat if isinstance(a, torch.Tensor))
    spec = _known_result(kernel, _signature(flat, grid))
    if spec is None:  # learn the result structure from a simulation on zeros
        spec = _simulate_on_zeros(kernel, flat, list(kwargs), grid)
    return _materialize(spec, flat, device)


def _simulate_on_zeros(kernel: Any, flat: list[Any], names: list[str], grid: tuple[int, ...]) -> Any:
    """Result structure of a kernel, found by simulating it on zero-filled arguments."""
    views = [np.zeros(_sizes(a.shape), dtype=numpy_dtype(a.dtype)) if isinstance(a, torch.Tensor) else a
             for a in flat]
    n_positional = len(flat) - len(names)
    with distributed_job.mirrored():  # no exchange with the job's other processes
        result, _ = simulator.run(kernel, views[:n_positional], dict(zip(names, views[n_positional:])), grid)
    spec = _describe(result, [v if isinstance(v, np.ndarray) else None for v in views])
    _remember_result(kernel, _signature(flat, grid), spec)
    return spec


launchers.device_launchers[DEVICE_TYPE] = launch  # importing this module makes neuron tensors run on the device
