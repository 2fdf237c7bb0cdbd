"""`run`: execute a kernel on numpy buffers, in place, and return its result and RunReport."""
from __future__ import annotations

import itertools
import math
import time
from typing import Any, Callable

import numpy as np

from ..dtypes import as_dtype
from ..errors import NKIError
from .context import RunContext, pop, push, set_last_report
from .cost_model import GENERATIONS, TRN2, HardwareConfig
from .report import RunReport
from .spmd import Launch
from .tile import Tile


def run(kernel: Any, args: list, kwargs: dict | None = None, grid: tuple[int, ...] = (), *,
        hardware: HardwareConfig | str = TRN2, fp32_compute: bool = False) -> tuple[Any, RunReport]:
    """Run `kernel` (an @nki.jit Kernel or a plain function) on the simulated NeuronCore.

    Array arguments are numpy arrays the kernel reads and writes IN PLACE; an array with
    ``flags.writeable == False`` is a read-only input (writing it raises the read-only-input
    rule error). Other arguments (scalars, ...) are passed unchanged. With a non-empty `grid` the
    kernel runs once per program id (row-major), each program a simulated core with a context of
    its own (`nki.simulator.spmd`: programs run one at a time, in order, and hand over to each other
    only at cross-core instructions, so communicating programs work and results are deterministic).
    Returns the last program's return value with HBM tensors turned into their numpy arrays (an
    argument's own array when it returns one) and the RunReport of all programs, which is also
    available as `last_report()` in the calling thread; a failing program's error is raised.
    State lives in the threads of the run only, so concurrent runs from several threads are safe.
    """
    func: Callable[..., Any] = getattr(kernel, "func", kernel)
    config = GENERATIONS[hardware] if isinstance(hardware, str) else hardware
    grid = normalize_grid(grid)
    name = getattr(func, "__name__", "kernel")
    report = RunReport(name, grid, config)
    program_ids = list(itertools.product(*(range(g) for g in grid)))
    launch = Launch(len(program_ids))
    wrapped: list[Any] = []

    def program(rank: int) -> Any:
        ctx = RunContext(name, config, grid, fp32_compute, report=report, launch=launch, rank=rank,
                         program_id=program_ids[rank])
        previous = push(ctx)
        try:
            if not wrapped:  # inside the first program, so argument errors are reported like kernel ones
                names = _parameter_names(func, len(args))
                wrapped.append(([_wrap(a, n) for a, n in zip(args, names)],
                                {k: _wrap(v, k) for k, v in (kwargs or {}).items()}))
            call_args, call_kwargs = wrapped[0]
            # Engines saturate and produce inf/NaN without trapping: no NumPy warnings for them.
            with np.errstate(all="ignore"):
                return func(*call_args, **call_kwargs)
        finally:
            pop(ctx, previous)

    start = time.perf_counter()
    try:
        return _unwrap(launch.run(program)[-1]), report
    finally:
        report.simulated_wall_seconds = time.perf_counter() - start
        set_last_report(report)


class nc(int):
    """`nl.nc(n)`: a launch-grid dimension of n logical NeuronCores (``kernel[nl.nc(2), 2]``); the
    simulator runs it like a grid dimension of size n."""

    def __repr__(self) -> str:
        return f"nc({int(self)})"


class spmd_dim(int):
    """`nl.spmd_dim(*sub_dims)`: a launch-grid dimension tiled into sub-dimensions, one of which may
    be ``nl.nc(n)`` (``kernel[nl.spmd_dim(nl.nc(2), 2), 2]`` is a first dimension of size 4 whose
    programs 0-1 go to physical core 0 and 2-3 to core 1). Its size is the product of the
    sub-dimensions and ``nl.program_id`` runs over it row-major; the simulator runs its programs
    one after another, so the distribution over cores does not change results."""

    sub_dims: tuple[int, ...]

    def __new__(cls, *sub_dims: Any) -> spmd_dim:
        if not sub_dims or any(not isinstance(d, (int, np.integer)) or int(d) < 1 for d in sub_dims):
            raise NKIError("grid", f"nl.spmd_dim takes sub-dimension sizes >= 1 (ints or nl.nc(n)), got "
                           f"{sub_dims}", "<launch>")
        if sum(isinstance(d, nc) for d in sub_dims) > 1:
            raise NKIError("grid", f"nl.spmd_dim takes at most one nl.nc sub-dimension, got {sub_dims}", "<launch>")
        dim = super().__new__(cls, math.prod(int(d) for d in sub_dims))
        dim.sub_dims = tuple(sub_dims)
        return dim

    def __repr__(self) -> str:
        return f"spmd_dim({', '.join(map(repr, self.sub_dims))})"


def normalize_grid(grid: Any) -> tuple[int, ...]:
    grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
    if any(int(g) < 1 for g in grid):
        raise NKIError("grid", f"SPMD grid dimensions must be >= 1, got {grid}", "<launch>")
    return tuple(int(g) for g in grid)


def _parameter_names(func: Callable[..., Any], count: int) -> list[str]:
    code = getattr(func, "__code__", None)
    names = list(code.co_varnames[:code.co_argcount]) if code else []
    return names[:count] + [f"arg{i}" for i in range(len(names), count)]


def _wrap(value: Any, name: str) -> Any:
    if isinstance(value, np.ndarray):
        dtype = as_dtype(value.dtype, f"argument '{name}'")
        return Tile(value, dtype, "hbm", name, readonly=not value.flags.writeable)
    if isinstance(value, (list, tuple)):
        return type(value)(_wrap(v, f"{name}[{i}]") for i, v in enumerate(value))
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, Tile):
        return value.data if value.is_hbm else np.array(value.data.astype(value.dtype))
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value
