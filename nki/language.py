"""`nki.language` (nl): the tile-level kernel language, executed by the simulator."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import numpy as np

from .dtypes import (  # noqa: F401
    as_dtype as _as_dtype,
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    uint8,
    uint16,
    uint32,
)
from .errors import NKIError as _NKIError
from .simulator import (
    cost_model as _cm,
    data_movement as _moves,
    index_expr as _index_expr,
    indirection as _indirection,  # noqa: F401  (binds NkiTensor.indirect)
    instructions as _ins,
    prng as _prng,
)
from .simulator.context import current as _current
from .simulator.engine import nc, spmd_dim  # noqa: F401  (launch-grid dimensions over logical cores)
from .simulator.operands import need_generation as _need_generation
from .simulator.tile import HBM_BUFFERS as _HBM_BUFFERS, MemoryRegion, NKIObject, Tile as NkiTensor  # noqa: F401
from .simulator.views import scalar_value as _scalar_value

DType = np.dtype  # nl dtypes are numpy dtypes (bfloat16 / float8 from ml_dtypes)

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm
private_hbm = MemoryRegion.private_hbm
_BUFFERS = (sbuf, psum) + _HBM_BUFFERS
_TRN2 = _cm.TRN2


class tile_size:
    """Hardware tile size constants of the simulated NeuronCore-v3 (trn2)."""

    pmax = _TRN2.partitions
    psum_fmax = psum_bank_fmax = _TRN2.psum_bank_bytes // 4       # fp32 elements per PSUM bank
    psum_fmax_bytes = psum_bank_fmax_bytes = _TRN2.psum_bank_bytes
    psum_num_banks = _TRN2.psum_banks
    gemm_stationary_fmax = _TRN2.stationary_fmax
    gemm_moving_fmax = _TRN2.moving_fmax
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    sbuf_size_bytes = _TRN2.sbuf_bytes_per_partition * _TRN2.partitions
    # usable bytes per partition: the partition minus the 16392 bytes the runtime reserves
    total_available_sbuf_size = sbuf_fmax_bytes = _TRN2.sbuf_bytes_per_partition - 16392
    sbuf_fmax = total_available_sbuf_size // 4


def is_hbm(x: Any) -> bool:
    """True if `x` lives in HBM (nl.hbm / nl.private_hbm / nl.shared_hbm)."""
    return _buffer_of(x) in _HBM_BUFFERS


def is_on_chip(x: Any) -> bool:
    """True if `x` lives in SBUF or PSUM."""
    return _buffer_of(x) in (sbuf, psum)


def is_sbuf(x: Any) -> bool:
    return _buffer_of(x) == sbuf


def is_psum(x: Any) -> bool:
    return _buffer_of(x) == psum


def _buffer_of(x: Any) -> str:
    """The memory region of a tensor, a tensor view (`hbm[...]`) or a region itself."""
    tensor = getattr(x, "tensor", x)
    return getattr(tensor, "buffer", x)


# ----------------------------------------------------------------------------- elementwise math
def _operator(op: Callable[..., NkiTensor], name: str, engine_op: str, doc: str) -> Callable[..., NkiTensor]:
    """`op` named `name`, documented, and usable as an instruction's ALU / activation operator."""
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    op._nki_op = engine_op  # type: ignore[attr-defined]
    return op


def _unary(name: str) -> Callable[..., NkiTensor]:
    def op(x: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
        return _ins.masked(mask, _ins.unary, name, x, dtype)
    return _operator(op, name, name, f"Elementwise {name} of a tile (ScalarE/VectorE instruction).")


def _binary(name: str) -> Callable[..., NkiTensor]:
    def op(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
        return _ins.masked(mask, _ins.binary, name, x, y, dtype)
    return _operator(op, name, name, f"Elementwise {name} of two tiles or a tile and a scalar (VectorE).")


exp, log, sin, cos, tanh = (_unary(n) for n in ("exp", "log", "sin", "cos", "tanh"))
sqrt, rsqrt, sigmoid, relu, gelu = (_unary(n) for n in ("sqrt", "rsqrt", "sigmoid", "relu", "gelu"))
gelu_apprx_tanh, silu, erf, softplus = (_unary(n) for n in ("gelu_apprx_tanh", "silu", "erf", "softplus"))
abs, negative, reciprocal, square, sign = (_unary(n) for n in ("abs", "negative", "reciprocal", "square", "sign"))
add, subtract, multiply, divide = (_binary(n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = (_binary(n) for n in ("maximum", "minimum", "power"))
equal, not_equal, greater, greater_equal = (_binary(n) for n in ("equal", "not_equal", "greater", "greater_equal"))
less, less_equal, logical_and, logical_or = (_binary(n) for n in ("less", "less_equal", "logical_and", "logical_or"))
tan, arctan, ceil, floor, trunc = (_unary(n) for n in ("tan", "arctan", "ceil", "floor", "trunc"))
gelu_dx, gelu_apprx_sigmoid, gelu_apprx_sigmoid_dx = (_unary(n) for n in ("gelu_dx", "gelu_apprx_sigmoid",
                                                                          "gelu_apprx_sigmoid_dx"))
silu_dx, mish, erf_dx, logical_not = (_unary(n) for n in ("silu_dx", "mish", "erf_dx", "logical_not"))
fmod, mod, average, logical_xor = (_binary(n) for n in ("fmod", "mod", "average", "logical_xor"))


def _integer_operands(name: str, operands: tuple) -> None:
    for x in operands:
        dt = x.dtype if isinstance(x, NkiTensor) else np.asarray(x).dtype
        if dt.kind not in "iub":
            raise _NKIError("bitwise-dtype", f"nl.{name} works on the bits of integer tiles, got {dt}: convert "
                           f"with nl.copy(x, dtype=nl.int32) (or view the bits with x.view(nl.int32))")


def _bitwise(name: str, arity: int) -> Callable[..., NkiTensor]:
    def op(*operands: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
        _integer_operands(name, operands)
        if arity == 1:
            return _ins.unary(name, operands[0], dtype)
        return _ins.binary(name, operands[0], operands[1], dtype)
    return _operator(op, name, name, f"Elementwise {name} of integer tiles (VectorE).")


bitwise_and, bitwise_or, bitwise_xor = (_bitwise(n, 2) for n in ("bitwise_and", "bitwise_or", "bitwise_xor"))
left_shift, right_shift, invert = _bitwise("left_shift", 2), _bitwise("right_shift", 2), _bitwise("invert", 1)


def _newer_core(name: str, generation: int) -> Callable[..., NkiTensor]:
    binary_op = _binary(name)

    def op(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
        _need_generation(f"nl.{name}", generation)
        return binary_op(x, y, dtype)
    return _operator(op, name, name, f"Elementwise {name} (VectorE, NeuronCore-v{generation}+: trn3).")


abs_max, abs_min = _newer_core("abs_max", 4), _newer_core("abs_min", 4)


def bypass(x: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """The input passed through unchanged (converted to `dtype`); as an operator (`op0=nl.bypass`)
    the instruction step is skipped."""
    return _ins.unary("copy", x, dtype, engine=_cm.VECTOR)


bypass._nki_op = "bypass"  # type: ignore[attr-defined]


def prelu(x: Any, alpha: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Parametric ReLU: x where x > 0, else alpha * x (ScalarE); alpha is a scalar or [P, 1] tile."""
    return _ins.binary("prelu", x, alpha, dtype, engine=_cm.SCALAR)


prelu._nki_op = "prelu"  # type: ignore[attr-defined]


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Select x where condition (a tile or index expression) is true, else y (VectorE)."""
    return _ins.masked(mask, _ins.where, condition, x, y, dtype)


# ----------------------------------------------------------------------------- reductions
def _reduction(name: str, opname: str) -> Callable[..., NkiTensor]:
    def op(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, mask: Any = None) -> NkiTensor:
        return _ins.masked(mask, _ins.reduce, opname, x, axis, keepdims, dtype, result_axes=(0,))
    return _operator(op, name, opname, f"{name} along free axes (default: all free axes) of a tile (VectorE).")


sum = _reduction("sum", "add")
max = _reduction("max", "maximum")
min = _reduction("min", "minimum")
mean = _reduction("mean", "mean")
prod = _reduction("prod", "multiply")
var = _reduction("var", "var")
all = _reduction("all", "all")


def rms_norm(x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None) -> NkiTensor:
    """x / sqrt(sum(x^2 along axis) / n + epsilon) * w: square and sum (VectorE), rsqrt with scale
    and bias (ScalarE), two multiplies (VectorE). dtype / compute_dtype set the result dtype."""
    out_dtype = dtype if dtype is not None else compute_dtype if compute_dtype is not None else x.dtype
    squares = _ins.binary("multiply", x, x, float32)
    total = _ins.reduce("add", squares, axis, True, float32)
    inv_rms = _ins.activation("rsqrt", total, bias=float(epsilon), scale=1.0 / n, dtype=float32)
    return _ins.binary("multiply", _ins.binary("multiply", x, inv_rms, float32), w, out_dtype)


def dropout(x: Any, rate: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """x with each element zeroed with probability `rate` (a scalar or one-element tile); kept
    elements are not rescaled (VectorE, the engine's random generator: see nl.random_seed)."""
    if isinstance(rate, NkiTensor) and rate.size == 1:
        rate = float(rate.data.reshape(-1)[0])
    return _prng.dropout(x, rate, dtype=dtype)


def softmax(x: Any, axis: int = -1, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Softmax along a free axis: max (VectorE), exp with bias (ScalarE), sum, scale (VectorE)."""
    neg_max = _ins.reduce("maximum", x, axis, True, float32, negate=True)
    e = _ins.activation("exp", x, bias=neg_max, dtype=float32)
    total = _ins.reduce("add", e, axis, True, float32)
    return _ins.binary("divide", e, total, dtype if dtype is not None else x.dtype)


# ----------------------------------------------------------------------------- memory
def load(src: Any, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """DMA an HBM tensor (or `tensor[index]`) into a new SBUF tile."""
    return _ins.load(src, mask, dtype)


def store(dst: Any, value: Any, mask: Any = None) -> None:
    """DMA a tile into an HBM tensor (or `tensor[index]`), rounding to the tensor's dtype."""
    _ins.store(dst, value, mask)


def ndarray(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> NkiTensor:
    """Allocate a tile (SBUF/PSUM, capacity-checked) or an HBM tensor; contents are zero."""
    if buffer not in _BUFFERS:
        raise _NKIError("buffer", f"unknown buffer {buffer!r} (use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm)")
    dt = _as_dtype(dtype)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if buffer in _HBM_BUFFERS:
        def make() -> NkiTensor:
            return NkiTensor(np.zeros(shape, dt), dt, buffer, name or "hbm_tensor")
        return _current().shared_hbm(make) if buffer == shared_hbm else make()
    return _ins.new_tile(np.zeros(shape, dt), dt, buffer, name)  # zeros of dt: also packed MX x4 dtypes


def full(shape: Any, fill_value: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> NkiTensor:
    """A new tile filled with `fill_value` (GpSimd memset); HBM tensors are filled directly."""
    if buffer in _HBM_BUFFERS:
        tensor = ndarray(shape, dtype, buffer, name)
        tensor.data[...] = fill_value
        return tensor
    return _ins.memset(shape, fill_value, dtype, buffer)


def zeros(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> NkiTensor:
    return full(shape, 0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: str = sbuf, name: str = "") -> NkiTensor:
    return full(shape, 1, dtype, buffer, name)


def zeros_like(a: Any, dtype: Any = None, buffer: str = sbuf, name: str = "") -> NkiTensor:
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer, name)


def empty_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    """A new tensor with `a`'s shape, dtype and buffer unless given (contents undefined: zero here)."""
    return ndarray(a.shape, dtype if dtype is not None else a.dtype, buffer if buffer is not None else a.buffer,
                   name)


def shared_constant(constant: Any, dtype: Any = None) -> NkiTensor:
    """A shared-HBM tensor holding `constant` (a numpy array, or the path of a .npy file), converted
    to `dtype` when given; every program of a grid sees the same tensor."""
    values = np.load(constant) if isinstance(constant, (str, os.PathLike)) else np.asarray(constant)
    dt = _as_dtype(dtype if dtype is not None else values.dtype)
    tensor = ndarray(values.shape, dt, shared_hbm, "shared_constant")
    tensor.data[...] = _ins._round(values, dt)
    return tensor


def shared_identity_matrix(n: int, dtype: Any = uint8, dst: Any = None) -> NkiTensor:
    """An [n, n] identity matrix in SBUF (new, or written into `dst`; GpSimd iota)."""
    eye = np.arange(n)[:, None] == np.arange(n)[None, :]
    return _ins.iota(eye.astype(np.int32), _as_dtype(dtype), dst)


def rand(shape: Any, dtype: Any = float32, buffer: Any = sbuf, name: str = "") -> NkiTensor:
    """A new tile of uniform random values in [0, 1): 32 random bits per element from the VectorE
    generator (nisa.rng), of which the top 24 are scaled by 2^-24 (VectorE)."""
    bits = _prng.rng(ndarray(shape, uint32, buffer, name))
    out = _ins.emit((bits.data >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24), _as_dtype(dtype),
                    None, "rand", buffer)
    _ins._record_lanes(_cm.VECTOR, "tensor_scalar[right_shift,multiply]", out.shape, out.dtype)
    return out


def random_seed(seed: Any, mask: Any = None) -> None:
    """Seed the random generator of nl.rand / nl.dropout: a [1, 1] 32-bit tile (or an int)."""
    if not isinstance(seed, NkiTensor):
        seed = full((1, 1), int(seed), int32)
    _prng.set_rng_seed(seed)


def copy(x: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Copy a tile into a new SBUF tile, converting to `dtype` (e.g. PSUM fp32 -> SBUF bf16)."""
    return _ins.masked(mask, _ins.copy, x, dtype)


# ----------------------------------------------------------------------------- TensorE
def matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None) -> NkiTensor:
    """x @ y into PSUM fp32. With transpose_x=False, x [M, K] is transposed on TensorE first;
    pass x already as [K, M] with transpose_x=True to skip that."""
    if transpose_x:
        return _ins.matmul(x, y)
    x_t = _ins.copy(_ins.transpose(x), x.dtype)  # PSUM -> SBUF: TensorE only reads SBUF
    return _ins.matmul(x_t, y)


def transpose(x: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Transpose a [P, F] SBUF tile (F <= 128) into a [F, P] PSUM tile (TensorE)."""
    return _ins.transpose(x, dtype)


# ----------------------------------------------------------------------------- SPMD & loops
def program_id(axis: int = 0) -> int:
    """Position of this program along `axis` of the launch grid (0 without a grid)."""
    ctx = _current()
    return ctx.program_id[axis] if axis < len(ctx.grid) else 0


def num_programs(axis: int = 0) -> int:
    """Size of the launch grid along `axis` (1 without a grid)."""
    ctx = _current()
    return ctx.grid[axis] if axis < len(ctx.grid) else 1


def program_ndim() -> int:
    return len(_current().grid)


def affine_range(*args: int) -> range:
    """Loop without loop-carried dependencies (the simulator runs iterations in order)."""
    return range(*args)


def sequential_range(*args: int) -> range:
    """Loop whose iterations depend on each other."""
    return range(*args)


def static_range(*args: int) -> range:
    """Loop unrolled at trace time."""
    return range(*args)


def dynamic_range(start: Any, stop: Any = None, step: int = 1) -> range:
    """Loop run on the device with runtime bounds: ints, one-element tiles or registers (the
    simulator reads their values when the loop starts)."""
    if stop is None:
        start, stop = 0, start
    return range(_scalar_value(start, "dynamic_range"), _scalar_value(stop, "dynamic_range"), _static_step(step))


def fori_loop(lower: Any, upper: Any, body_fun: Callable[[int], Any], step: int = 1) -> None:
    """Compiled loop: body_fun(i) for i in range(lower, upper, step); the bounds may be runtime
    values (read when the loop starts); loop state lives in SBUF / HBM."""
    for i in range(_scalar_value(lower, "fori_loop"), _scalar_value(upper, "fori_loop"), _static_step(step)):
        body_fun(i)


def while_loop(init: Any, body_fun: Callable[[Any], Any]) -> None:
    """Compiled while loop: r = init; while r != 0: r = body_fun(r) (r an int, one-element tile or
    register, read before each iteration)."""
    condition = init
    while _scalar_value(condition, "while_loop condition") != 0:
        condition = body_fun(condition)


def _static_step(step: Any) -> int:
    if not isinstance(step, (int, np.integer)) or step < 1:
        raise _NKIError("loop-step", f"the step of a compiled loop is a compile-time positive int, got {step!r}")
    return int(step)


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Block whose instructions the compiler keeps in program order; the simulator always runs
    instructions in program order, so it has no effect."""
    yield


def device_print(prefix: str, x: Any, mask: Any = None) -> None:
    """Print `prefix` and the values of a tile or tensor (on the host, when the instruction runs)."""
    values = x.read() if hasattr(x, "resolve") else np.asarray(getattr(x, "data", x))
    print(prefix, values.astype(x.dtype) if isinstance(x, NkiTensor) else values, flush=True)


# ----------------------------------------------------------------------------- index expressions
def arange(*args: int) -> np.ndarray:
    """Index expression: nl.arange(128)[:, None] indexes partitions, nl.arange(512)[None, :] the free axis.
    Each call is its own index variable (one tile axis wherever it is used)."""
    return _index_expr.arange(*args)


def ds(start: Any, size: int) -> slice:
    """Dynamic slice of `size` elements starting at `start` (an int, or a runtime value read now: a
    nisa.VirtualRegister or a one-element tile)."""
    start = start if isinstance(start, int) else _scalar_value(start, "nl.ds start")
    return slice(start, start + size)


def expand_dims(data: Any, axis: int) -> Any:
    """A view of `data` with a new size-1 dimension at `axis` (no copy; not the partition axis of an
    on-chip tile)."""
    return data.expand_dim(axis)


def broadcast_to(src: Any, shape: Any) -> NkiTensor:
    """A new tile holding `src` broadcast to `shape` with numpy rules (a VectorE copy)."""
    return src.broadcast_to(shape)


class _IndexGrid(tuple):
    """The index expressions of nl.mgrid: unpack them (`i_p, i_f = nl.mgrid[0:128, 0:512]`) or
    read them as .p (partition), .x, .y, .z (free axes)."""

    def __getattr__(self, name: str) -> np.ndarray:
        axes = ("p", "x", "y", "z")
        if name in axes[:len(self)]:
            return self[axes.index(name)]
        raise AttributeError(f"the index grid has {len(self)} axes: no .{name}")


class _Grid:
    """nl.mgrid[0:128, 0:512]: one index variable per axis, as broadcastable (open-grid) arrays. An
    access gets one tile axis per variable it uses, so `a[ix, iy]` of a 3-axis grid is 2-D."""

    def __getitem__(self, key: Any) -> _IndexGrid:
        return _IndexGrid(_index_expr.grid(key if isinstance(key, tuple) else (key,)))


mgrid = _Grid()


# ---- DMA transpose and gathers
def load_transpose2d(src: Any, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """DMA an HBM tensor [F, P] into a new SBUF tile [P, F] (2-D transpose on the DMA engine)."""
    if isinstance(src, NkiTensor) and not src.is_hbm:
        raise _NKIError("load-source", "nl.load_transpose2d reads HBM tensors; transpose on-chip tiles with "
                       "nisa.nc_transpose")
    return _moves.dma_transpose(None, src, (1, 0), dtype=dtype, opcode="load_transpose2d")


def gather_flattened(data: Any, indices: Any, axis: int = 0, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """GpSimd: a new tile shaped like `indices` with out[p, ...] = data[p].flatten()[indices[p, ...]]
    (uint32 indices into each partition's flattened free dimensions)."""
    if axis != 0:
        raise _NKIError("unsupported-feature", f"nl.gather_flattened gathers within partitions (axis=0), "
                       f"got axis={axis}")
    return _moves.gather_flat(None, data, indices, dtype, "gather_flattened")
