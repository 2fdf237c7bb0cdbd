"""`neuronxcc.nki.language` of Neuron SDK 2.26 and earlier: the current `nki.language` plus the
names that generation had (`par_dim`, `static_cast`, `loop_reduce`, ...)."""
from __future__ import annotations

from typing import Any

from ..errors import source_location
from ..language import *  # noqa: F401,F403
from ..language import copy as _copy
from ..simulator import instructions as _ins
from ..simulator.context import current
from ..simulator.ops import op_name


def par_dim(size: int) -> int:
    """Marks the partition dimension in a tile shape (`(nl.par_dim(128), 512)`); the size itself."""
    return int(size)


def static_cast(tile: Any, dtype: Any) -> Any:
    """A copy of `tile` converted to `dtype`."""
    return _copy(tile, dtype=dtype)


def loop_reduce(x: Any, op: Any, loop_indices: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """Reduce `x` with `op` across the iterations of `loop_indices`: returns the running result,
    which restarts when every loop index is 0 (one accumulator per kernel line)."""
    indices = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    running = current().loop_reductions
    key = source_location()
    if key not in running or all(int(i) == 0 for i in indices):
        result = _ins.copy(x, dtype)
    else:
        result = _ins.binary(op_name(op), running[key], x, dtype)
    running[key] = result
    return result
