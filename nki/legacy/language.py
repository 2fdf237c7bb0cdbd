"""`neuronxcc.nki.language` of Neuron SDK 2.26 and earlier: the current `nki.language` plus the
names that generation had (`par_dim` with block dimensions, `static_cast`, `loop_reduce`, `finfo`, ...)."""
from __future__ import annotations

from typing import Any

import ml_dtypes as _ml_dtypes

from .. import language as _language
from ..dtypes import as_dtype as _as_dtype
from ..errors import source_location
from ..language import *  # noqa: F401,F403
from ..language import copy as _copy
from ..simulator import blocks as _blocks, instructions as _ins
from ..simulator.context import current
from ..simulator.ops import op_name
from .isa import fp32  # noqa: F401  (nl.fp32.min, as SDK 2.26 kernels spell it)


def par_dim(size: int) -> int:
    """Marks the partition dimension in a tile shape (`(nl.par_dim(128), 512)`); dims before it are
    block dims (`(4, nl.par_dim(128), 512)`: 4 tiles of (128, 512)). An int of value `size`."""
    return _blocks.ParDim(size)


def finfo(dtype: Any) -> Any:
    """Machine limits of a floating dtype, as numpy.finfo (`nl.finfo(nl.bfloat16).min`); also for
    bfloat16 and the float8 types."""
    return _ml_dtypes.finfo(_as_dtype(dtype))


def _blocked(shape: Any, buffer: Any) -> bool:
    return buffer in (sbuf, psum) and _blocks.block_ndim(shape) > 0  # noqa: F405


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", lazy_initialization: bool = False,
            **_: Any) -> Any:
    """A new tensor (contents zero); on chip, dims before `nl.par_dim` are block dims.
    `lazy_initialization` has no effect on results."""
    buffer = sbuf if buffer is None else buffer  # noqa: F405
    if _blocked(shape, buffer):
        return _blocks.allocate(shape, _as_dtype(dtype), buffer, name)
    return _language.ndarray(shape, dtype, buffer, name)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "",
         lazy_initialization: bool = False, **_: Any) -> Any:
    """A new tensor filled with `fill_value` (GpSimd memset on chip); block dims as in ndarray."""
    buffer = sbuf if buffer is None else buffer  # noqa: F405
    if _blocked(shape, buffer):
        return _blocks.allocate(shape, _as_dtype(dtype), buffer, name, fill=fill_value)
    return _language.full(shape, fill_value, dtype, buffer, name)


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", lazy_initialization: bool = False,
          **_: Any) -> Any:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", lazy_initialization: bool = False,
         **_: Any) -> Any:
    return full(shape, 1, dtype, buffer, name)


def _like_shape(a: Any) -> tuple:
    """`a`'s shape, its par_dim kept where `a` has block dims."""
    shape = tuple(a.shape)
    if isinstance(a, _blocks.BlockTile):
        at = len(a.block_shape)
        shape = shape[:at] + (par_dim(shape[at]),) + shape[at + 1:]
    return shape


def zeros_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Any:
    return zeros(_like_shape(a), dtype if dtype is not None else a.dtype, buffer, name)


def empty_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **_: Any) -> Any:
    """A new tensor with `a`'s shape (block dims included), dtype and buffer unless given."""
    return ndarray(_like_shape(a), dtype if dtype is not None else a.dtype,
                   buffer if buffer is not None else a.buffer, name)


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


# Whole block tensors: elementwise functions run once per block, DMA and creation take them as they
# are, every other function refuses them (it works on (P, F) tiles).
_REDUCTIONS = {"sum", "max", "min", "mean", "prod", "var", "all"}
_blocks.guard(globals(),
              elementwise={n for n, f in globals().items() if getattr(f, "_nki_op", None)} - _REDUCTIONS
              | {"copy", "static_cast", "where"},
              passthrough={"load", "store", "par_dim", "ndarray", "full", "zeros", "ones", "zeros_like",
                           "empty_like", "device_print", "finfo"})
