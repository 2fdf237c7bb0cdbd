"""Selection instructions: elementwise choices between a tile and a fallback driven by a predicate
tile (tensor_copy_predicated, select_reduce), by an affine expression of the element position
(affine_select, GpSimd) or by the free-axis index against per-partition bounds (range_select); and
iota (GpSimd), which writes that affine expression of the position itself."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import bool_, int8, int16, int32, is_float, uint8, uint16, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd, registers as regs
from .context import current
from .ops import BINARY, op_name

_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")


def _comparison(op: Any, what: str, allowed: tuple[str, ...] = _COMPARISONS) -> Any:
    name = op_name(op)
    if name not in allowed:
        raise NKIError("unsupported-op", f"{what}: the comparison must be one of "
                       f"{', '.join('nl.' + a for a in allowed)}, got {op!r}")
    return BINARY[name]


def tensor_copy_predicated(src: Any, predicate: Any, dst: Any, reverse_pred: bool = False) -> Any:
    """VectorE: dst = src where predicate is nonzero (zero with reverse_pred); other elements of dst
    keep their values. `src` is a tile of dst's dtype or a scalar of dst's kind."""
    what = "tensor_copy_predicated"
    target = _ins.destination(dst, what)
    pred = opd.tile(predicate, what, "predicate")
    opd.need_dtype(what, "predicate", pred, (uint8, uint16, uint32, bool_))
    opd.same_layout(what, target, predicate=pred, src=src)
    if isinstance(src, (bool, int, float, np.number)):
        if isinstance(src, (float, np.floating)) != is_float(target.dtype):
            raise NKIError("dtype", f"{what}: a scalar src must be of dst's kind ({target.dtype}): pass "
                           f"{'a float' if is_float(target.dtype) else 'an int'}")
        values: Any = src
    else:
        source = opd.tile(src, what, "src")
        if source.dtype != target.dtype:
            raise NKIError("dtype", f"{what}: src ({source.dtype}) and dst ({target.dtype}) must share a dtype: "
                           f"convert src with nisa.tensor_copy first")
        if source.buffer == pred.buffer == "psum":
            raise NKIError("psum-operands", f"{what}: src and predicate cannot both be in PSUM")
        values = source.data.reshape(target.shape)
    mask = (pred.data != 0).reshape(target.shape) != reverse_pred
    merged = np.where(mask, values, target.data)
    target.write(Ellipsis, _ins._round(merged, target.dtype, current().fp32_compute))
    _ins._record_lanes(cm.VECTOR, what, target.shape, target.dtype, tile_inputs=2)
    return target


def _select(what: str, keep: np.ndarray, on_true: Any, on_false: Any, dst: Any, dtype: Any,
            engine: str) -> Any:
    """where(keep, on_true, on_false) in fp32, delivered to dst (or a new tile)."""
    values = opd.fp32(on_true, what)
    out = np.where(keep.reshape(values.shape), values, np.float32(on_false) if np.isscalar(on_false)
                   else _ins.align_partitions([on_false, values])[0])
    tile = _ins.emit(out.astype(np.float32, copy=False), opd.new_dtype(dtype, on_true.dtype), dst, what)
    _ins._record_lanes(engine, what, on_true.shape, tile.dtype)
    return tile


def affine_positions(pattern: Any, channel_multiplier: int, offset: int, parts: int) -> np.ndarray:
    """[P, F] values of offset + p * channel_multiplier + sum_k i_k * step_k over the [[step, num], ...]
    pattern (outermost first), in 32-bit integer arithmetic."""
    free = np.zeros(1, np.int64)
    for step, num in pattern:
        free = (free[:, None] + np.arange(int(num), dtype=np.int64) * int(step)).reshape(-1)
    values = int(offset) + np.arange(parts, dtype=np.int64)[:, None] * int(channel_multiplier) + free[None, :]
    return values.astype(np.int32)


def _pattern_positions(what: str, pattern: Any, channel_multiplier: int, offset: int, layout: Any) -> np.ndarray:
    """affine_positions over `layout`'s partitions, once the pattern is checked: at most 4 [step, num]
    pairs (the GpSimd access pattern is 4-D) whose nums multiply to its elements per partition."""
    free = opd.rows(layout.data).shape[1]
    pairs = list(pattern) if isinstance(pattern, (list, tuple)) else None
    if pairs is None or not all(isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in pairs):
        raise NKIError("affine-pattern", f"{what}: pattern must be a list of [step, num] pairs (outermost first), "
                       f"got {pattern!r}")
    if not pairs or len(pairs) > 4 or any(int(num) < 1 for _, num in pairs) \
            or int(np.prod([int(num) for _, num in pairs])) != free:
        raise NKIError("affine-pattern", f"{what}: pattern {pattern} must have 1 to 4 [step, num] pairs whose nums "
                       f"(each >= 1) multiply to the {free} elements per partition of the tile {layout.shape}")
    return affine_positions(pairs, channel_multiplier, offset, layout.shape[0])


def iota(dst: Any, pattern: Any, offset: int = 0, channel_multiplier: int = 0) -> Any:
    """GpSimd: dst = offset + partition * channel_multiplier + the pattern's free-axis terms, computed
    in 32-bit integer arithmetic (wrapping) and converted to dst's dtype."""
    target = _ins.destination(dst, "iota", ("sbuf",))
    values = _pattern_positions("iota", pattern, channel_multiplier, offset, target).reshape(target.shape)
    target.write(Ellipsis, _ins._round(values, target.dtype, current().fp32_compute))
    _ins._record_lanes(cm.GPSIMD, "iota", target.shape, target.dtype)
    return target


def affine_select(pattern: Any, channel_multiplier: int, on_true_tile: Any, on_false_value: float,
                  cmp_op: Any = "equal", offset: int = 0, dst: Any = None) -> Any:
    """GpSimd: dst = on_true_tile where cmp_op(affine value of the position, 0), else on_false_value;
    the affine value is offset + partition * channel_multiplier + the pattern's free-axis terms."""
    what = "affine_select"
    x = opd.tile(on_true_tile, what, "on_true_tile")
    opd.need_buffer(what, "on_true_tile", x, ("sbuf",))
    target = _ins.destination(dst, what, ("sbuf",))
    opd.same_layout(what, x, dst=target)
    keep = _comparison(cmp_op, what, _COMPARISONS + ("not_equal",))(
        _pattern_positions(what, pattern, channel_multiplier, offset, x), 0)
    return _select(what, keep, x, on_false_value, target, None, cm.GPSIMD)


def affine_select_expression(pred: Any, on_true_tile: Any, on_false_value: float, dtype: Any = None) -> Any:
    """GpSimd, SDK 2.26 form: on_true_tile where the index expression `pred` (e.g. i_p >= i_f) is
    true (> 0), else on_false_value, into a new tile."""
    what = "affine_select"
    x = opd.tile(on_true_tile, what, "on_true_tile")
    try:
        keep = np.broadcast_to(np.asarray(pred) > 0, x.shape)
    except ValueError:
        raise NKIError("shape-mismatch", f"{what}: predicate of shape {np.shape(pred)} does not cover "
                       f"on_true_tile {x.shape}") from None
    return _select(what, keep, x, on_false_value, None, dtype, cm.GPSIMD)


def _own_reduction(reduce_cmd: Any, reduce_res: Any) -> Any:
    """reduce_res asked with reduce_cmd=idle receives this instruction's own reduction (reset_reduce):
    the registers are otherwise undefined after an idle instruction."""
    idle = getattr(reduce_cmd, "name", reduce_cmd) == "idle"
    return "reset_reduce" if idle and reduce_res is not None else reduce_cmd


def range_select(on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any,
                 reduce_cmd: Any = "reset_reduce", reduce_res: Any = None, reduce_op: Any = "maximum",
                 range_start: int = 0, on_false_value: float = opd.FP32_MIN, dst: Any = None,
                 dtype: Any = None) -> Any:
    """VectorE (NeuronCore-v3+): keep on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1)
    for the free index i + range_start, else on_false_value (FP32_MIN); the max per partition goes
    into the VectorE registers as `reduce_cmd` says and reduce_res receives them."""
    what = "range_select"
    x = opd.tile(on_true_tile, what, "on_true_tile")
    if not is_float(x.dtype):
        raise NKIError("dtype", f"{what}: on_true_tile must be a float tile, got {x.dtype}")
    if on_false_value != opd.FP32_MIN:
        raise NKIError("range-select-fill", f"{what}: on_false_value must be FP32_MIN (-3.4028235e+38), a hardware "
                       f"constant; got {on_false_value} (mask afterwards with nisa.select_reduce for another fill)")
    name = regs.reducer(reduce_op, ("maximum",), what)
    parts, free = x.shape[0], opd.rows(x.data).shape[1]
    index = (int(range_start) + np.arange(free, dtype=np.float32))[None, :]
    low = opd.per_partition(bound0, parts, what, "bound0")
    high = opd.per_partition(bound1, parts, what, "bound1")
    keep = _comparison(comp_op0, what)(index, low) & _comparison(comp_op1, what)(index, high)
    tile = _select(what, keep, x, on_false_value, dst, dtype, cm.VECTOR)
    out = np.where(keep, opd.rows(opd.fp32(x, what)), np.float32(on_false_value))
    regs.accumulate(cm.VECTOR, _own_reduction(reduce_cmd, reduce_res), name, regs.free_reduce(name, out), parts,
                    what)
    regs.read_out(cm.VECTOR, parts, reduce_res, what)
    return tile


def select_reduce(predicate: Any, on_true: Any, on_false: Any, dst: Any, reduce_res: Any = None,
                  reduce_cmd: Any = "idle", reduce_op: Any = "maximum", reverse_pred: bool = False) -> Any:
    """VectorE: dst = on_true where predicate is nonzero (zero with reverse_pred), else on_false (a
    scalar or [P, 1] tile); the max per partition goes into the VectorE registers as `reduce_cmd` says."""
    what = "select_reduce"
    x, pred = opd.tile(on_true, what, "on_true"), opd.tile(predicate, what, "predicate")
    target = _ins.destination(dst, what)
    opd.same_layout(what, x, predicate=pred, dst=target)
    opd.need_dtype(what, "predicate", pred, (int8, uint8, int16, uint16, bool_))
    if x.dtype in (int32, uint32):
        raise NKIError("dtype", f"{what}: on_true cannot be {x.dtype}: use a float or 8/16-bit integer tile")
    if x.buffer == pred.buffer == "psum":
        raise NKIError("psum-operands", f"{what}: on_true and predicate cannot both be in PSUM")
    name = regs.reducer(reduce_op, ("maximum",), what)
    parts = x.shape[0]
    fallback = opd.per_partition(on_false, parts, what, "on_false")
    keep = (pred.data != 0).reshape(x.shape) != reverse_pred
    tile = _select(what, keep, x, fallback, target, None, cm.VECTOR)
    out = np.where(opd.rows(keep), opd.rows(opd.fp32(x, what)), fallback)
    regs.accumulate(cm.VECTOR, _own_reduction(reduce_cmd, reduce_res), name, regs.free_reduce(name, out), parts,
                    what)
    regs.read_out(cm.VECTOR, parts, reduce_res, what)
    return tile
