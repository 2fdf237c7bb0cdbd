"""`nki.language` (nl): the tile-level kernel language, executed by the simulator."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .dtypes import (  # noqa: F401
    as_dtype,
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    uint8,
    uint16,
    uint32,
)
from .errors import NKIError
from .simulator import instructions as _ins
from .simulator.context import current
from .simulator.tile import HBM_BUFFERS, Tile

sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
shared_hbm = "shared_hbm"
private_hbm = "private_hbm"
_BUFFERS = (sbuf, psum) + HBM_BUFFERS


class tile_size:
    """Hardware tile limits (trn2)."""

    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512


# ----------------------------------------------------------------------------- elementwise math
def _unary(name: str) -> Callable[..., Tile]:
    def op(x: Any, dtype: Any = None, mask: Any = None) -> Tile:
        return _ins.unary(name, x, dtype)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} of a tile (ScalarE/VectorE instruction)."
    op._nki_op = name  # type: ignore[attr-defined]
    return op


def _binary(name: str) -> Callable[..., Tile]:
    def op(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Tile:
        return _ins.binary(name, x, y, dtype)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} of two tiles or a tile and a scalar (VectorE)."
    op._nki_op = name  # type: ignore[attr-defined]
    return op


exp, log, sin, cos, tanh = (_unary(n) for n in ("exp", "log", "sin", "cos", "tanh"))
sqrt, rsqrt, sigmoid, relu, gelu = (_unary(n) for n in ("sqrt", "rsqrt", "sigmoid", "relu", "gelu"))
gelu_apprx_tanh, silu, erf, softplus = (_unary(n) for n in ("gelu_apprx_tanh", "silu", "erf", "softplus"))
abs, negative, reciprocal, square, sign = (_unary(n) for n in ("abs", "negative", "reciprocal", "square", "sign"))
add, subtract, multiply, divide = (_binary(n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = (_binary(n) for n in ("maximum", "minimum", "power"))
equal, not_equal, greater, greater_equal = (_binary(n) for n in ("equal", "not_equal", "greater", "greater_equal"))
less, less_equal, logical_and, logical_or = (_binary(n) for n in ("less", "less_equal", "logical_and", "logical_or"))


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Tile:
    """Select x where condition (a tile or index expression) is true, else y (VectorE)."""
    return _ins.where(condition, x, y, dtype)


# ----------------------------------------------------------------------------- reductions
def _reduction(name: str, opname: str) -> Callable[..., Tile]:
    def op(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None) -> Tile:
        return _ins.reduce(opname, x, axis, keepdims, dtype)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{name} along free axes (default: all free axes) of a tile (VectorE)."
    op._nki_op = opname  # type: ignore[attr-defined]
    return op


sum = _reduction("sum", "add")
max = _reduction("max", "maximum")
min = _reduction("min", "minimum")
mean = _reduction("mean", "mean")
prod = _reduction("prod", "multiply")


def softmax(x: Any, axis: int = -1, dtype: Any = None, mask: Any = None) -> Tile:
    """Softmax along a free axis: max (VectorE), exp with bias (ScalarE), sum, scale (VectorE)."""
    neg_max = _ins.reduce("maximum", x, axis, True, float32, negate=True)
    e = _ins.activation("exp", x, bias=neg_max, dtype=float32)
    total = _ins.reduce("add", e, axis, True, float32)
    return _ins.binary("divide", e, total, dtype if dtype is not None else x.dtype)


# ----------------------------------------------------------------------------- memory
def load(src: Any, mask: Any = None, dtype: Any = None) -> Tile:
    """DMA an HBM tensor (or `tensor[index]`) into a new SBUF tile."""
    return _ins.load(src, mask, dtype)


def store(dst: Any, value: Any, mask: Any = None) -> None:
    """DMA a tile into an HBM tensor (or `tensor[index]`), rounding to the tensor's dtype."""
    _ins.store(dst, value, mask)


def ndarray(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> Tile:
    """Allocate a tile (SBUF/PSUM, capacity-checked) or an HBM tensor; contents are zero."""
    if buffer not in _BUFFERS:
        raise NKIError("buffer", f"unknown buffer {buffer!r} (use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm)")
    dt = as_dtype(dtype)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if buffer in HBM_BUFFERS:
        def make() -> Tile:
            return Tile(np.zeros(shape, dt), dt, buffer, name or "hbm_tensor")
        return current().shared_hbm(make) if buffer == shared_hbm else make()
    return _ins.new_tile(np.zeros(shape, np.float32), dt, buffer, name)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> Tile:
    """A new tile filled with `fill_value` (GpSimd memset); HBM tensors are filled directly."""
    if buffer in HBM_BUFFERS:
        tensor = ndarray(shape, dtype, buffer, name)
        tensor.data[...] = fill_value
        return tensor
    return _ins.memset(shape, fill_value, dtype, buffer)


def zeros(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> Tile:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> Tile:
    return full(shape, 1, dtype, buffer, name)


def zeros_like(a: Any, dtype: Any = None, buffer: str = sbuf, name: str = "") -> Tile:
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer, name)


def copy(x: Any, dtype: Any = None, mask: Any = None) -> Tile:
    """Copy a tile into a new SBUF tile, converting to `dtype` (e.g. PSUM fp32 -> SBUF bf16)."""
    return _ins.copy(x, dtype)


# ----------------------------------------------------------------------------- TensorE
def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None) -> Tile:
    """x @ y into PSUM fp32. With transpose_x=False, x [M, K] is transposed on TensorE first;
    pass x already as [K, M] with transpose_x=True to skip that."""
    if transpose_x:
        return _ins.matmul(x, y)
    x_t = _ins.copy(_ins.transpose(x), x.dtype)  # PSUM -> SBUF: TensorE only reads SBUF
    return _ins.matmul(x_t, y)


def transpose(x: Any, dtype: Any = None, mask: Any = None) -> Tile:
    """Transpose a [P, F] SBUF tile (F <= 128) into a [F, P] PSUM tile (TensorE)."""
    return _ins.transpose(x, dtype)


# ----------------------------------------------------------------------------- SPMD & loops
def program_id(axis: int = 0) -> int:
    """Position of this program along `axis` of the launch grid (0 without a grid)."""
    ctx = current()
    return ctx.program_id[axis] if axis < len(ctx.grid) else 0


def num_programs(axis: int = 0) -> int:
    """Size of the launch grid along `axis` (1 without a grid)."""
    ctx = current()
    return ctx.grid[axis] if axis < len(ctx.grid) else 1


def program_ndim() -> int:
    return len(current().grid)


def affine_range(*args: int) -> range:
    """Loop without loop-carried dependencies (the simulator runs iterations in order)."""
    return range(*args)


def sequential_range(*args: int) -> range:
    """Loop whose iterations depend on each other."""
    return range(*args)


def static_range(*args: int) -> range:
    """Loop unrolled at trace time."""
    return range(*args)


# ----------------------------------------------------------------------------- index expressions
def arange(*args: int) -> np.ndarray:
    """Index expression: nl.arange(128)[:, None] indexes partitions, nl.arange(512)[None, :] the free axis."""
    return np.arange(*args)


def ds(start: int, size: int) -> slice:
    """Dynamic slice of `size` elements starting at `start`."""
    return slice(start, start + size)


class _Grid:
    """nl.mgrid[0:128, 0:512] -> object with .p (partition) and .x (free) index expressions."""

    def __getitem__(self, key: Any) -> Any:
        grids = np.ogrid[key]
        names = ("p", "x", "y", "z")
        return type("IndexGrid", (), dict(zip(names, grids)))


mgrid = _Grid()
