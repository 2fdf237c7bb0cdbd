"""The instruction set: each function checks the rules, computes with vectorised numpy in fp32,
rounds to the destination dtype and records the instruction with its estimated cost."""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

import numpy as np

from ..dtypes import as_dtype, bool_, float32, is_float, promote
from ..errors import NKIError
from . import cost_model as cm, index_expr as _ix, rules, tile as _tile
from .context import current
from .ops import BINARY, INTEGER_CLOSED, REDUCE, UNARY, op_name, require
from .tile import AccessPattern, Tile, resolve


# ----------------------------------------------------------------------------- values & tiles
def _free(shape: tuple[int, ...]) -> int:
    return math.prod(shape[1:])


def _on_chip(x: Tile, what: str) -> Tile:
    """An instruction's on-chip operand (noted as read: RunReport.dependent_schedule)."""
    if x.is_hbm:
        raise NKIError("hbm-operand", f"{what} reads on-chip tiles; HBM tensor '{x.name}' must be "
                       f"loaded first (nl.load)")
    current().touch(x)
    return x


def _value(x: Any, what: str) -> tuple[Any, np.dtype | None]:
    """Compute-domain value of an operand and its tile dtype (None for scalars/index exprs)."""
    if isinstance(x, AccessPattern):
        _on_chip(x.tensor, what)
    if isinstance(x, Tile):
        return _on_chip(x, what).data, x.dtype
    if isinstance(x, (bool, int, float, np.number)):
        return x, None
    if isinstance(x, np.ndarray):  # index expression such as nl.arange(128)[:, None]
        return x, None
    raise NKIError("operand", f"{what}: unsupported operand {type(x).__name__}")


def align_partitions(values: list[Any]) -> list[Any]:
    """Tiles broadcast aligned on the partition axis (axis 0), not on the last axis as in NumPy:
    a [P] reduction result combines with a [P, F] tile as [P, 1]."""
    ranks = [v.ndim for v in values if isinstance(v, np.ndarray)]
    if not ranks or min(ranks) == max(ranks):
        return values
    ndim = max(ranks)
    return [v.reshape(v.shape + (1,) * (ndim - v.ndim)) if isinstance(v, np.ndarray) and 0 < v.ndim < ndim
            else v for v in values]


def _compute(fn: Callable[..., Any], values: list[Any], as_float: bool) -> np.ndarray:
    conv = []
    for v in align_partitions(values):
        if isinstance(v, np.ndarray):
            if as_float:
                v = v.astype(np.float32, copy=False)
            elif v.dtype.itemsize == 8:
                v = v.astype(np.int32)
        elif as_float:
            v = np.float32(v)
        conv.append(v)
    return np.asarray(fn(*conv))  # floating-point warnings are off for the whole run (engine.run)


def _round(values: np.ndarray, dtype: np.dtype, keep_fp32: bool = False) -> np.ndarray:
    """Round compute results to `dtype` (the engines' output conversion)."""
    if keep_fp32 and is_float(dtype):
        return values.astype(np.float32, copy=False)
    if dtype == bool_:
        return values != 0
    if not is_float(dtype) and values.dtype.kind == "f":
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(dtype, copy=False)


def new_tile(values: np.ndarray, dtype: np.dtype, buffer: str = "sbuf", name: str = "") -> Tile:
    """Allocate an on-chip tile holding `values` rounded to `dtype` (capacity-checked)."""
    ctx = current()
    rules.check_partition(values.shape, buffer, ctx.config)
    tile = Tile(_round(values, dtype, ctx.fp32_compute), dtype, buffer, name)
    ctx.allocate(tile, buffer, _free(values.shape) * dtype.itemsize)
    ctx.touch(tile, write=True)
    return tile


def fit(values: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    """`values` shaped as a destination of `shape`: equal, partition-aligned broadcast, the same
    elements per partition in another free layout ([P, 1] into [P] and back), or the same shape
    but for unit axes ([1, F] into [F]: no element moves)."""
    values = np.asarray(values)
    if values.shape == tuple(shape):
        return values
    if values.ndim < len(shape):
        values = values.reshape(values.shape + (1,) * (len(shape) - values.ndim))
    try:
        return np.broadcast_to(values, shape)
    except ValueError:
        pass
    if values.size == math.prod(shape) and (
            (values.ndim and len(shape) and values.shape[0] == shape[0])
            or [n for n in values.shape if n != 1] == [n for n in shape if n != 1]):
        return values.reshape(shape)
    raise NKIError("dst-shape", f"{what}: result of shape {values.shape} does not fit destination of shape "
                   f"{tuple(shape)}")


def destination(dst: Any, what: str, buffers: tuple[str, ...] = ("sbuf", "psum")) -> Tile:
    """The on-chip tile an instruction writes (its `dst` argument)."""
    if isinstance(dst, AccessPattern) or (isinstance(dst, Tile) and dst.is_hbm):
        raise NKIError("dst-buffer", f"{what} writes on-chip tiles; got HBM tensor "
                       f"'{(dst.tensor if isinstance(dst, AccessPattern) else dst).name}' (compute into an "
                       f"SBUF tile, then nisa.dma_copy it to HBM)")
    if not isinstance(dst, Tile):
        raise NKIError("dst", f"{what}: dst must be a tile (nl.ndarray(..., buffer=nl.sbuf)), got "
                       f"{type(dst).__name__}")
    if dst.buffer not in buffers:
        raise NKIError("dst-buffer", f"{what} writes {' or '.join(b.upper() for b in buffers)} tiles; dst is a "
                       f"{dst.buffer.upper()} tile")
    return dst


def emit(values: np.ndarray, dtype: np.dtype, dst: Any, what: str, buffer: str = "sbuf") -> Tile:
    """Deliver an instruction's result: into `dst` (rounded to its dtype), or a new `buffer` tile
    when the instruction was called in the return-a-tile form."""
    if dst is None:
        return new_tile(values, dtype, buffer)
    target = destination(dst, what)
    target.write(Ellipsis, _round(fit(values, target.shape, what), target.dtype, current().fp32_compute))
    return target


def masked(mask: Any, instruction: Callable[..., Any], *args: Any, result_axes: tuple[int, ...] | None = None,
           **kwargs: Any) -> Any:
    """Run `instruction` under a legacy `mask=`: masked-out elements are neither read nor computed.
    A mask that keeps a box of a tile operand (a ragged tail) narrows the operand to the box, and a
    result of the box's extent on an axis is returned at the operand's full extent (zero outside the
    box) — on every axis for elementwise instructions, on `result_axes` for the others (``(0,)``:
    per-partition results such as reductions, whose free extent is not the operand's). Any other
    mask only excuses the out-of-range positions of an index expression it excludes."""
    if mask is None:
        return instruction(*args, **kwargs)
    boxes: list[tuple[tuple[int, ...], tuple[slice, ...]]] = []
    args = tuple(_masked_operand(a, mask, boxes) for a in args)
    kwargs = {k: _masked_operand(v, mask, boxes) for k, v in kwargs.items()}
    out = instruction(*args, **kwargs)
    return _unbox(out, *boxes[0], result_axes) if boxes and isinstance(out, Tile) and out.on_chip else out


def zeroed(mask: Any, instruction: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `instruction` under a legacy `mask=` with the masked-out elements of its tile operands
    read as zero: for instructions whose result is laid out otherwise than their operands (matmul,
    transposes, selections by position), where narrowing an operand would move the others. A result
    of an operand's layout is zero where the mask excludes (not computed)."""
    if mask is None:
        return instruction(*args, **kwargs)
    out = instruction(*(_zeroed_operand(a, mask) for a in args),
                      **{k: _zeroed_operand(v, mask) for k, v in kwargs.items()})
    return computed_where(mask, out)


def masked_into(mask: Any, dst: Tile, instruction: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an instruction that writes `dst` (one of its arguments) under a legacy `mask=`: its other
    tile operands read zero where the mask excludes, and dst keeps its values there."""
    if mask is None:
        return instruction(*args, **kwargs)
    keep = _mask_on(dst, mask)
    before = None if keep is None else np.array(dst.data)
    out = instruction(*(a if a is dst else _zeroed_operand(a, mask) for a in args),
                      **{k: v if v is dst else _zeroed_operand(v, mask) for k, v in kwargs.items()})
    if keep is not None:
        dst.write(Ellipsis, np.where(keep, dst.data, before))
    return out


def computed_where(mask: Any, out: Any) -> Any:
    """A new on-chip result zeroed where a legacy `mask=` that lays out on it excludes (not computed)."""
    if mask is None or not isinstance(out, Tile) or not out.on_chip:
        return out
    keep = _mask_on(out, mask)
    return out if keep is None or keep.all() else new_tile(np.where(keep, out.data, 0), out.dtype, out.buffer)


def _mask_on(tile: Tile, mask: Any) -> np.ndarray | None:
    """The mask as a boolean array of the tile's shape (None if it does not lay out on it)."""
    axes = tile._index.axes if tile._index is not None else None
    try:
        return np.broadcast_to(_ix.on_axes(mask, axes) != 0, tile.shape)
    except (ValueError, NKIError):
        return None


def _kept(x: Any, mask: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """An on-chip tile operand's values (out-of-range index positions clipped) and the mask laid out
    on it; None when the mask does not lay out on it or keeps an out-of-range position."""
    if not isinstance(x, Tile) or x.is_hbm:
        return None
    keep = _mask_on(x, mask)
    pending = isinstance(x, _tile.PendingTile)
    if keep is None or (pending and (x._index.invalid & keep).any()):
        return None
    return (x.clipped if pending else x.data), keep


def _untouched(x: Any) -> Any:
    # Reading a pending tile (an out-of-range index expression no mask excuses) raises its error.
    return x.data if isinstance(x, _tile.PendingTile) else x


def _zeroed_operand(x: Any, mask: Any) -> Any:
    kept = _kept(x, mask)
    if kept is None:
        return _untouched(x)
    values, keep = kept
    return Tile(np.where(keep, values, np.zeros((), values.dtype)), x.dtype, x.buffer, base=x)


def _masked_operand(x: Any, mask: Any, boxes: list) -> Any:
    kept = _kept(x, mask)
    if kept is None:
        return _untouched(x)
    values, keep = kept
    rows = [np.flatnonzero(keep.any(axis=tuple(a for a in range(keep.ndim) if a != d))) for d in range(keep.ndim)]
    if any(r.size == 0 for r in rows):
        return x
    box = tuple(slice(int(r[0]), int(r[-1]) + 1) for r in rows)
    if not keep[box].all():  # not a box: compute everywhere, out-of-range positions read as 0
        return _zeroed_operand(x, mask) if isinstance(x, _tile.PendingTile) else x
    boxes.append((x.shape, box))
    return Tile(values[box], x.dtype, x.buffer, base=x)


def _unbox(out: Tile, full: tuple[int, ...], box: tuple[slice, ...], axes: tuple[int, ...] | None) -> Tile:
    """A result computed on the box, at the operand's full extent on the axes (of `axes`) it kept."""
    sizes = [b.stop - b.start for b in box]
    place = [box[d] if (axes is None or d in axes) and d < len(box) and n == sizes[d] != full[d] else slice(None)
             for d, n in enumerate(out.shape)]
    if all(p == slice(None) for p in place):
        return out
    shape = tuple(full[d] if p != slice(None) else n for d, (p, n) in enumerate(zip(place, out.shape)))
    values = np.zeros(shape, out.data.dtype)
    values[tuple(place)] = out.data
    return new_tile(values, out.dtype, out.buffer)


def _record_lanes(engine: str, opcode: str, shape: tuple[int, ...], dtype: np.dtype,
                  ops_per_element: float = 1.0, tile_inputs: int = 1) -> None:
    ctx = current()
    seconds = cm.lane_seconds(ctx.config, engine, _free(shape), tile_inputs)
    ctx.record(engine, opcode, shape, dtype, seconds,
               flops=math.prod(shape) * ops_per_element)


def _out_dtype(dtype: Any, operand_dtypes: list[np.dtype | None]) -> np.dtype:
    if dtype is not None:
        return as_dtype(dtype)
    return promote([d for d in operand_dtypes if d is not None])


def _broadcast_error(what: str, exc: Exception) -> NKIError:
    return NKIError("shape-mismatch", f"{what}: operand shapes do not broadcast ({exc})")


# ----------------------------------------------------------------------------- elementwise
def unary(name: str, x: Any, dtype: Any = None, engine: str | None = None, dst: Any = None) -> Tile:
    fn, default_engine = require(name, UNARY, "elementwise")
    value, xdt = _value(x, name)
    out_dtype = _out_dtype(dtype, [xdt])
    as_float = name not in INTEGER_CLOSED or is_float(out_dtype) or (xdt is not None and is_float(xdt))
    out = _compute(fn, [value], as_float)
    tile = emit(out, out_dtype, dst, name)
    eng = engine or default_engine
    opcode = "activation" if eng == cm.SCALAR else "tensor_scalar"
    _record_lanes(eng, f"{opcode}[{name}]", out.shape, out_dtype)
    return tile


def _elementwise(name: str, operands: list[Any], dtype: Any) -> tuple[np.ndarray, np.dtype]:
    fn = require(name, BINARY, "binary")
    pairs = [_value(o, name) for o in operands]
    out_dtype = _out_dtype(dtype, [d for _, d in pairs])
    as_float = (name not in INTEGER_CLOSED or is_float(out_dtype)
                or any(d is not None and is_float(d) for _, d in pairs)
                or any(isinstance(v, (float, np.floating)) for v, _ in pairs))
    try:
        out = _compute(fn, [v for v, _ in pairs], as_float)
    except ValueError as exc:
        raise _broadcast_error(name, exc) from None
    return out, out_dtype


def binary(name: str, a: Any, b: Any, dtype: Any = None, dst: Any = None, engine: str = cm.VECTOR) -> Tile:
    out, out_dtype = _elementwise(name, [a, b], dtype)
    tile = emit(out, out_dtype, dst, name)
    both_tiles = isinstance(a, Tile) and isinstance(b, Tile)
    opcode = "tensor_tensor" if both_tiles else "tensor_scalar"
    _record_lanes(engine, f"{opcode}[{name}]", out.shape, tile.dtype, tile_inputs=2 if both_tiles else 1)
    return tile


def inplace(name: str, tile: Tile, other: Any) -> Tile:
    """`tile op= other`: writes into `tile`; `psum += matmul(...)` is PSUM accumulation (free)."""
    _on_chip(tile, f"in-place {name}")
    if (name == "add" and tile.buffer == "psum" and isinstance(other, Tile)
            and other._from_matmul):
        try:
            summed = tile.data.astype(np.float32) + other.data
            tile.write(Ellipsis, _round(np.broadcast_to(summed, tile.shape), tile.dtype, True))
        except ValueError as exc:
            raise _broadcast_error("psum accumulation", exc) from None
        return tile
    out, _ = _elementwise(name, [tile, other], tile.dtype)
    if out.shape != tile.shape:
        raise NKIError("shape-mismatch", f"in-place {name} would change tile shape {tile.shape} "
                       f"to {out.shape}")
    tile.write(Ellipsis, _round(out, tile.dtype, current().fp32_compute))
    tile_inputs = 2 if isinstance(other, Tile) else 1
    _record_lanes(cm.VECTOR, f"{'tensor_tensor' if tile_inputs == 2 else 'tensor_scalar'}[{name}]",
                  tile.shape, tile.dtype, tile_inputs=tile_inputs)
    return tile


def assign(tile: Tile, key: Any, value: Any) -> None:
    """`tile[key] = value` on an on-chip tile (a VectorE copy)."""
    index = resolve(tile.shape, key, f"{tile.buffer.upper()} tile")
    data, _ = _value(value, "tile assignment")
    data = _compute(lambda v: v, [data], is_float(tile.dtype))
    data = fit_value(data, index.shape, "tile assignment")  # partition-aligned, as instruction destinations
    tile.write(index.key, _round(data, tile.dtype, current().fp32_compute))
    _record_lanes(cm.VECTOR, "tensor_copy", index.shape, tile.dtype)


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, dtype: Any = None,
               dst: Any = None) -> Tile:
    """ScalarE: op(data * scale + bias); bias/scale are scalars or [P, 1] tiles."""
    name = op_name(op)
    fn, _ = require(name, UNARY, "activation")
    value, xdt = _value(data, "activation")
    scale_v, _ = _value(scale, "activation scale")
    bias_v = np.float32(0.0) if bias is None else _value(bias, "activation bias")[0]
    out_dtype = _out_dtype(dtype, [xdt])
    # The affine step in the simulator only where it changes something (a full-tile pass each).
    unit_scale = isinstance(scale_v, (int, float)) and scale_v == 1
    try:
        if bias is None and unit_scale:
            out = _compute(fn, [value], True)
        else:
            out = _compute(lambda x, s, b: fn(x * s + b) if not unit_scale else fn(x + b),
                           [value, scale_v, bias_v], True)
    except ValueError as exc:
        raise _broadcast_error("activation", exc) from None
    tile = emit(out, out_dtype, dst, "activation")
    _record_lanes(cm.SCALAR, f"activation[{name}]", out.shape, tile.dtype)
    return tile


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None, dst: Any = None,
                  engine: str = cm.VECTOR) -> Tile:
    """VectorE: (data op0 operand0) op1 operand1, operands are scalars or [P, 1] tiles."""
    steps = [(op_name(op0), operand0, reverse0)]
    if op1 is not None:
        steps.append((op_name(op1), operand1, reverse1))
    value, xdt = _value(data, "tensor_scalar")
    out_dtype = _out_dtype(dtype, [xdt])
    acc = value
    for name, operand, reverse in steps:
        fn = require(name, BINARY, "tensor_scalar")
        opv, _ = _value(operand, "tensor_scalar operand")
        try:
            acc = _compute(fn, [opv, acc] if reverse else [acc, opv], True)
        except ValueError as exc:
            raise _broadcast_error("tensor_scalar", exc) from None
    tile = emit(acc, out_dtype, dst, "tensor_scalar")
    _record_lanes(engine, "tensor_scalar[" + ",".join(s[0] for s in steps) + "]",
                  acc.shape, tile.dtype, len(steps))
    return tile


def where(cond: Any, x: Any, y: Any, dtype: Any = None, dst: Any = None) -> Tile:
    out, out_dtype = _elementwise_select(cond, x, y, dtype)
    tile = emit(out, out_dtype, dst, "select")
    _record_lanes(cm.VECTOR, "select", out.shape, tile.dtype)
    return tile


def _elementwise_select(cond: Any, x: Any, y: Any, dtype: Any) -> tuple[np.ndarray, np.dtype]:
    c, _ = _value(cond, "where")
    xv, xdt = _value(x, "where")
    yv, ydt = _value(y, "where")
    out_dtype = _out_dtype(dtype, [xdt, ydt])
    try:
        out = _compute(lambda c_, a, b: np.where(c_ != 0, a, b), [c, xv, yv], is_float(out_dtype))
    except ValueError as exc:
        raise _broadcast_error("where", exc) from None
    return out, out_dtype


def reduce(op: Any, data: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None,
           negate: bool = False, dst: Any = None) -> Tile:
    """VectorE reduction along free axes only."""
    name = op_name(op)
    fn = require(name, REDUCE, "reduce")
    value, xdt = _value(data, f"reduce[{name}]")
    ndim = np.ndim(value)
    axes = tuple(range(1, ndim)) if axis is None else (axis if isinstance(axis, (tuple, list)) else (axis,))
    axes = rules.check_reduce_axes(tuple(int(a) for a in axes), ndim)
    out_dtype = _out_dtype(dtype, [xdt])
    out = _compute(lambda v: fn(v, axis=axes, keepdims=keepdims), [value], True)
    if negate:
        out = -out
    tile = emit(out, out_dtype, dst, f"tensor_reduce[{name}]")
    _record_lanes(cm.VECTOR, f"tensor_reduce[{name}]", np.shape(value), tile.dtype)
    return tile


def broadcast(tile: Tile, shape: tuple[int, ...]) -> Tile:
    value, _ = _value(tile, "broadcast_to")
    try:  # partition-aligned: a [P] reduction result broadcasts as [P, 1]
        out = np.broadcast_to(align_partitions([value, np.empty(shape, bool)])[0], shape)
    except ValueError as exc:
        raise _broadcast_error("broadcast_to", exc) from None
    result = new_tile(np.array(out), tile.dtype)
    _record_lanes(cm.VECTOR, "tensor_copy[broadcast]", shape, tile.dtype)
    return result


def copy(src: Any, dtype: Any = None, buffer: str = "sbuf", engine: str = cm.VECTOR, dst: Any = None) -> Tile:
    value, xdt = _value(src, "copy")
    out_dtype = _out_dtype(dtype, [xdt])
    tile = emit(np.asarray(value), out_dtype, dst, "tensor_copy", buffer)
    _record_lanes(engine, "tensor_copy", tile.shape, tile.dtype)
    return tile


# ----------------------------------------------------------------------------- TensorE
def _tensor_dtype(a: Tile, b: Tile) -> np.dtype:
    return float32 if float32 in (a.dtype, b.dtype) else (a.dtype if a.dtype == b.dtype else b.dtype)


def matmul(stationary: Tile, moving: Tile, dst: Any = None, accumulate: bool | None = None) -> Tile:
    """TensorE: stationary[K, M]^T @ moving[K, N] -> PSUM [M, N] fp32.

    Into `dst` (a PSUM tile) the product accumulates onto what the tile holds unless
    `accumulate=False` (PSUM accumulation is the TensorE default); without `dst` it is a new tile."""
    ctx = current()
    for t in (stationary, moving):
        if not isinstance(t, Tile):
            raise NKIError("operand", f"matmul operands must be tiles, got {type(t).__name__}")
    rules.check_matmul(stationary, moving, ctx.config)
    ctx.touch(stationary)
    ctx.touch(moving)
    k, m = stationary.shape
    n = moving.shape[1]
    out = stationary.data.astype(np.float32, copy=False).T @ moving.data.astype(np.float32, copy=False)
    if dst is None:
        tile = new_tile(out, float32, "psum")
        tile._from_matmul = True
    else:
        tile = destination(dst, "nc_matmul", ("psum",))
        out = fit(out, tile.shape, "nc_matmul")
        if accumulate is not False:
            out = tile.data.astype(np.float32) + out
        tile.write(Ellipsis, _round(out, tile.dtype, True))
    dt = _tensor_dtype(stationary, moving)
    ctx.record(cm.TENSOR, "matmul", (k, m, n), dt, cm.matmul_seconds(ctx.config, n, dt),
               flops=2 * k * m * n)
    return tile


def transpose(data: Tile, dtype: Any = None, dst: Any = None) -> Tile:
    """TensorE transpose (a matmul against identity): [P, F] SBUF -> [F, P] PSUM; into an SBUF
    `dst` it is the VectorE transpose of a block of at most 32 x 32."""
    ctx = current()
    if not isinstance(data, Tile) or data.ndim != 2:
        raise NKIError("transpose-rank", "transpose takes a 2-D [partition, free] tile")
    p, f = data.shape
    if dst is not None and destination(dst, "nc_transpose").buffer == "sbuf":
        if p > 32 or f > 32:
            raise NKIError("transpose-vector", f"the VectorE transpose (dst in SBUF) takes blocks of at most "
                           f"32 x 32, got {data.shape}: write into a PSUM tile for the TensorE transpose")
        tile = emit(np.ascontiguousarray(_value(data, "nc_transpose")[0].T), data.dtype, dst, "nc_transpose")
        _record_lanes(cm.VECTOR, "transpose", (p, f), data.dtype)
        return tile
    if data.buffer != "sbuf":
        raise NKIError("matmul-operand-sbuf", f"TensorE transpose reads SBUF, got a "
                       f"{data.buffer.upper()} tile: copy it to SBUF first")
    if f > ctx.config.partitions:
        raise NKIError("transpose-free", f"transpose input free size {f} > {ctx.config.partitions}: "
                       f"it becomes the partition dimension of the result")
    out_dtype = data.dtype if dtype is None else as_dtype(dtype)
    ctx.touch(data)
    tile = emit(np.ascontiguousarray(data.data.T), out_dtype, dst, "nc_transpose", "psum")
    ctx.record(cm.TENSOR, "transpose", (p, f), data.dtype,
               cm.matmul_seconds(ctx.config, p, data.dtype))
    return tile


# ----------------------------------------------------------------------------- DMA & GpSimd
def _pattern(x: Any, what: str) -> AccessPattern | Tile:
    if isinstance(x, AccessPattern):
        return x
    if isinstance(x, Tile):
        return AccessPattern(x, Ellipsis) if x.is_hbm else x
    raise NKIError("operand", f"{what}: expected a tensor or tile, got {type(x).__name__}")


def _record_dma(opcode: str, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> None:
    ctx = current()
    ctx.record(cm.DMA, opcode, shape, dtype, cm.dma_seconds(ctx.config, nbytes), dma_bytes=nbytes)


def load(src: Any, mask: Any = None, dtype: Any = None) -> Tile:
    """DMA HBM -> new SBUF tile."""
    pattern = _pattern(src, "nl.load")
    if isinstance(pattern, Tile):
        raise NKIError("load-source", f"nl.load reads HBM tensors; got a {pattern.buffer.upper()} "
                       f"tile (use nl.copy for on-chip tiles)")
    values = pattern.read(mask)
    out_dtype = pattern.dtype if dtype is None else as_dtype(dtype)
    tile = new_tile(values, out_dtype)
    _record_dma("load", values.shape, pattern.dtype, values.nbytes)
    return tile


def store(dst: Any, value: Any, mask: Any = None) -> None:
    """DMA on-chip tile (or scalar) -> HBM, rounding to the tensor's dtype."""
    pattern = _pattern(dst, "nl.store")
    if isinstance(pattern, Tile):
        raise NKIError("store-destination", f"nl.store writes HBM tensors; got a "
                       f"{pattern.buffer.upper()} tile (assign with tile[...] = value)")
    _dma_write(pattern, value, mask, "store")


def fit_value(values: Any, shape: tuple[int, ...], opcode: str) -> np.ndarray:
    """`fit` for a value written by a store, a DMA or an assignment: a misfit is `shape-mismatch`."""
    try:
        return fit(values, shape, opcode)
    except NKIError:
        raise NKIError("shape-mismatch", f"{opcode}: value of shape {np.shape(values)} does not fit "
                       f"destination of shape {tuple(shape)}") from None


def _in_grid_order(values: np.ndarray, index: Any) -> np.ndarray | None:
    """A value laid out in the declaration order of the `nl.mgrid` variables the access uses, when
    the access orders them otherwise (its first index uses a later variable:
    ``out[i * 128 + i_f, i_p]`` of ``i_p, i_f = nl.mgrid[...]`` stores a tile whose partitions are
    i_p): the value transposed to the access's layout, or None."""
    axes = index.axes
    if axes is None or len(axes) != len(index.shape) or any(a.position is None for a in axes):
        return None
    order = sorted(range(len(axes)), key=lambda i: axes[i].position)
    if values.shape != tuple(index.shape[i] for i in order):
        return None
    return values.transpose(np.argsort(order))


def _dma_write(pattern: AccessPattern, value: Any, mask: Any, opcode: str) -> None:
    values, _ = _value(value, opcode)
    values = np.asarray(values)
    index = pattern.resolve(mask)
    shape = index.shape
    transposed = _in_grid_order(values, index) if values.shape != tuple(shape) else None
    values = values if transposed is None else transposed
    values = fit_value(values, shape, opcode)
    rounded = _round(values, pattern.dtype)
    pattern.write(rounded, mask)
    _record_dma(opcode, shape, pattern.dtype, rounded.nbytes)


def dma_copy(dst: Any, src: Any, mask: Any = None) -> None:
    """DMA between any two of HBM / SBUF (tiles or tensor slices)."""
    source = _pattern(src, "dma_copy src")
    values = source.read(mask) if isinstance(source, AccessPattern) else _value(source, "dma_copy")[0]
    target = _pattern(dst, "dma_copy dst")
    if isinstance(target, AccessPattern):
        _dma_write(target, values, mask, "dma_copy")
        return
    values = fit_value(values, target.shape, "dma_copy")
    target.write(Ellipsis, _round(values, target.dtype, current().fp32_compute))
    _record_dma("dma_copy", target.shape, target.dtype, target.size * target.dtype.itemsize)


def iota(expr: Any, dtype: Any = float32, dst: Any = None) -> Tile:
    """GpSimd: materialise an index expression (e.g. nl.arange(128)[:, None] * 4 + i_f)."""
    values = np.asarray(expr.data if isinstance(expr, Tile) else expr)
    out_dtype = as_dtype(dtype) if dst is None else dst.dtype
    if values.ndim == 0:
        raise NKIError("tile-rank", "iota needs an index expression with a partition axis")
    tile = emit(values, out_dtype, dst, "iota")
    _record_lanes(cm.GPSIMD, "iota", values.shape, out_dtype)
    return tile


def memset(shape: tuple[int, ...] | None, value: Any, dtype: Any, buffer: str = "sbuf", dst: Any = None,
           engine: str = cm.GPSIMD) -> Tile:
    """A tile filled with `value` (GpSimd unless another engine is given): new, or `dst`."""
    if dst is not None:
        target = destination(dst, "memset")
        target.write(Ellipsis, _round(np.full(target.shape, value, np.float32 if is_float(target.dtype)
                                              else np.int64), target.dtype, current().fp32_compute))
        _record_lanes(engine, "memset", target.shape, target.dtype)
        return target
    out_dtype = as_dtype(dtype)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    tile = new_tile(np.full(shape, value, dtype=np.float32 if is_float(out_dtype) else None),
                    out_dtype, buffer)
    _record_lanes(engine, "memset", shape, out_dtype)
    return tile


_tile.bind_instruction_set(sys.modules[__name__])  # Tile's operators run these
