"""Per-partition reduction registers of the lane engines (128 fp32 accumulators each), kept in the
run context: `activation(..., reduce_cmd=...)` and friends accumulate into them across instructions."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIError
from . import instructions as _ins
from .context import current
from .operands import rows
from .ops import op_name
from .tile import Tile


def registers(engine: str) -> np.ndarray:
    """The engine's registers in the current run (zero at the start of a run)."""
    regs = current().registers
    if engine not in regs:
        regs[engine] = np.zeros(current().config.partitions, np.float32)
    return regs[engine]


# reduce_op name -> (value the registers reset to, combine two partial results, free-axis reduction)
_REDUCERS: dict[str, tuple[float, Any, Any]] = {
    "add": (0.0, np.add, np.sum),
    "multiply": (1.0, np.multiply, np.prod),
    "maximum": (-np.inf, np.maximum, np.max),
    "minimum": (np.inf, np.minimum, np.min),
    "abs_max": (0.0, np.maximum, lambda v, axis: np.max(np.abs(v), axis=axis)),
    "abs_min": (np.inf, np.minimum, lambda v, axis: np.min(np.abs(v), axis=axis)),
}


def reducer(reduce_op: Any, allowed: tuple[str, ...], what: str) -> str:
    """Name of `reduce_op`, refused unless the instruction's registers support it."""
    name = op_name(reduce_op) if reduce_op is not None else None
    if name not in allowed:
        raise NKIError("unsupported-op", f"{what}: the reduction registers support reduce_op "
                       f"{' / '.join('nl.' + a for a in allowed)}, got {reduce_op!r}")
    return name


def free_reduce(name: str, values: np.ndarray) -> np.ndarray:
    """The per-partition reduction of `values` ([P, ...] fp32) along all free axes: [P]."""
    return _REDUCERS[name][2](rows(values), axis=1)


def begin(engine: str, cmd: Any, name: str, parts: int, what: str, init: Any = None) -> np.ndarray:
    """Apply the reset / load part of `cmd` (reset to the identity of reduce_op `name`, or load
    `init`, a scalar or [P, 1] values) and return the registers of partitions [0, parts) (a view)."""
    command = getattr(cmd, "name", cmd)
    regs = registers(engine)[:parts]
    if command in ("reset", "reset_reduce"):
        regs[:] = 0.0 if name == "subtract" else _REDUCERS[name][0]  # a running difference starts at 0
    elif command == "load_reduce":
        if init is None:
            raise NKIError("reduce-init", f"{what}(reduce_cmd=load_reduce) loads the registers from "
                           f"reduce_init: pass reduce_init (a scalar or a [P, 1] tile)")
        regs[:] = np.broadcast_to(np.asarray(init, np.float32).reshape(-1), (parts,))
    return regs


def accumulate(engine: str, cmd: Any, name: str, partial: np.ndarray, parts: int, what: str,
               init: Any = None) -> None:
    """Apply `cmd` to the engine's registers with this instruction's per-partition `partial` ([P])."""
    regs = begin(engine, cmd, name, parts, what, init)
    if getattr(cmd, "name", cmd) in ("reduce", "reset_reduce", "load_reduce"):
        regs[:] = _REDUCERS[name][1](regs, partial)


def read_out(engine: str, parts: int, reduce_res: Any, what: str) -> None:
    """Copy the registers of partitions [0, parts) into `reduce_res` ([P, 1]) when given."""
    if reduce_res is not None:
        _ins.emit(registers(engine)[:parts].reshape(parts, 1).copy(), np.dtype(np.float32), reduce_res,
                  f"{what} reduce_res")


def reduce_into_registers(engine: str, cmd: Any, reduce_op: Any, out: Tile, reduce_res: Any, what: str) -> None:
    """Apply `cmd` (an nki.isa.reduce_cmd) with the free-axis `reduce_op` reduction of `out`, then
    copy the registers of `out`'s partitions into `reduce_res` when given."""
    name = getattr(cmd, "name", cmd)
    if name == "load_reduce":
        raise NKIError("unsupported-feature", f"{what}(reduce_cmd=load_reduce) is not simulated: use reset_reduce "
                       f"and add the loaded values with nisa.tensor_tensor")
    parts = out.shape[0]
    if name in ("reduce", "reset_reduce"):
        if reduce_op is None or op_name(reduce_op) != "add":
            raise NKIError("unsupported-op", f"{what}: the reduction registers only sum (reduce_op=nl.add), got "
                           f"{reduce_op!r}; reduce with nisa.tensor_reduce for max/min")
        accumulate(engine, cmd, "add", free_reduce("add", out.data.astype(np.float32, copy=False)), parts, what)
    else:
        begin(engine, cmd, "add", parts, what)
    read_out(engine, parts, reduce_res, what)
