"""Per-partition reduction registers of the lane engines (128 fp32 accumulators each), kept in the
run context: `activation(..., reduce_cmd=...)` and friends accumulate into them across instructions."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NKIError
from . import instructions as _ins
from .context import current
from .ops import op_name
from .tile import Tile


def registers(engine: str) -> np.ndarray:
    """The engine's registers in the current run (zero at the start of a run)."""
    regs = current().registers
    if engine not in regs:
        regs[engine] = np.zeros(current().config.partitions, np.float32)
    return regs[engine]


def reduce_into_registers(engine: str, cmd: Any, reduce_op: Any, out: Tile, reduce_res: Any, what: str) -> None:
    """Apply `cmd` (an nki.isa.reduce_cmd) with the free-axis `reduce_op` reduction of `out`, then
    copy the registers of `out`'s partitions into `reduce_res` when given."""
    name = getattr(cmd, "name", cmd)
    if name == "load_reduce":
        raise NKIError("unsupported-feature", f"{what}(reduce_cmd=load_reduce) is not simulated: use reset_reduce "
                       f"and add the loaded values with nisa.tensor_tensor")
    regs = registers(engine)
    parts = out.shape[0]
    if name in ("reset", "reset_reduce"):
        regs[:parts] = 0.0
    if name in ("reduce", "reset_reduce"):
        if reduce_op is None or op_name(reduce_op) != "add":
            raise NKIError("unsupported-op", f"{what}: the reduction registers only sum (reduce_op=nl.add), got "
                           f"{reduce_op!r}; reduce with nisa.tensor_reduce for max/min")
        values = out.data.astype(np.float32, copy=False).reshape(parts, -1)
        regs[:parts] += values.sum(axis=1)
    if reduce_res is not None:
        _ins.emit(regs[:parts].reshape(parts, 1).copy(), np.dtype(np.float32), reduce_res, f"{what} reduce_res")
