"""Ranking instructions: the 8 largest values per partition (max8), their positions
(nc_find_index8), replacing them (nc_match_replace8, VectorE), and top-k over 16-partition
snakes (topk, GpSimd). Values are compared in fp32."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import bfloat16, uint16, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd
from .context import current

_EIGHT_MAX_READ = 16384
_TOPK_GROUP = 16


def _data_rows(data: Any, what: str, low: int = 8) -> tuple[Any, np.ndarray]:
    x = opd.tile(data, what, "data")
    values = opd.rows(opd.fp32(x, what))
    if not low <= values.shape[1] <= _EIGHT_MAX_READ:
        raise NKIError("elements-per-partition", f"{what} reads {low} to {_EIGHT_MAX_READ} elements per partition, "
                       f"got {values.shape[1]}: split the free axis and combine the per-slice results")
    return x, values


def _eight_values(vals: Any, parts: int, what: str) -> np.ndarray:
    v = opd.tile(vals, what, "vals")
    values = opd.rows(opd.fp32(v, what))
    if v.shape[0] != parts or values.shape[1] != 8:
        raise NKIError("shape-mismatch", f"{what}: vals must hold 8 values in each of the {parts} partitions, got "
                       f"shape {v.shape}")
    return values


def max8(src: Any, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: the 8 largest values of each partition, in descending order ([P, 8])."""
    x, values = _data_rows(src, "max8")
    top = -np.sort(-values, axis=1)[:, :8]
    tile = _ins.emit(top, opd.new_dtype(dtype, x.dtype), dst, "max8")
    _ins._record_lanes(cm.VECTOR, "max8", x.shape, tile.dtype)
    return tile


def _first_matches(values: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Index of the first element of each row of `values` equal to each of the row's `wanted` values."""
    hits = values[:, None, :] == wanted[:, :, None]
    if not hits.any(axis=2).all():
        p, j = np.argwhere(~hits.any(axis=2))[0]
        raise NKIError("value-not-found", f"{what}: value {wanted[p, j]} of vals is not in partition {p} of data "
                       f"(the hardware result is undefined); pass values taken from data, e.g. by nisa.max8")
    return hits.argmax(axis=2)


def nc_find_index8(data: Any, vals: Any, dst: Any = None, dtype: Any = uint32) -> Any:
    """VectorE: per partition, the index (in data's flattened free axes) of the first occurrence of
    each of the 8 vals ([P, 8] uint16 / uint32)."""
    what = "nc_find_index8"
    x, values = _data_rows(data, what)
    out_dtype = _ins.destination(dst, what).dtype if dst is not None else opd.new_dtype(dtype, uint32)
    if out_dtype not in (uint16, uint32):
        raise NKIError("dtype", f"{what} writes uint16 or uint32 indices, not {out_dtype}")
    index = _first_matches(values, _eight_values(vals, x.shape[0], what), what)
    tile = _ins.emit(index, out_dtype, dst, what)
    _ins._record_lanes(cm.VECTOR, what, x.shape, tile.dtype)
    return tile


def nc_match_replace8(data: Any, vals: Any, imm: float, dst_idx: Any = None, dst: Any = None,
                      dtype: Any = None) -> Any:
    """VectorE: data with the first occurrence of each of the 8 vals replaced by imm (a repeated value
    replaces successive occurrences); dst_idx receives the replaced positions."""
    what = "nc_match_replace8"
    x, values = _data_rows(data, what, low=1)
    wanted = _eight_values(vals, x.shape[0], what)
    replaced = values.copy()
    index = np.empty(wanted.shape, np.int64)
    rows = np.arange(values.shape[0])
    # Eight dependent steps (a repeated value must find the next occurrence), each over all partitions.
    for j in range(wanted.shape[1]):
        index[:, j] = _first_matches(replaced, wanted[:, j:j + 1], what)[:, 0]
        replaced[rows, index[:, j]] = np.float32(imm)
    tile = _ins.emit(replaced.reshape(x.shape), opd.new_dtype(dtype, x.dtype), dst, what)
    if dst_idx is not None:
        _ins.emit(index, uint32, dst_idx, f"{what} dst_idx")
    _ins._record_lanes(cm.VECTOR, what, x.shape, tile.dtype)
    return tile


def topk(val_dst: Any, idx_dst: Any, src: Any, n: int, sorted: bool = False) -> tuple[Any, Any]:
    """GpSimd: top-k of each group of 16 partitions. A group's source is a snake: element i is at
    partition i % 16, column i // 16 (n active elements); its k = val_dst's free size largest values
    (ascending) and their snake indices land in the same snake layout of val_dst / idx_dst."""
    what = "topk"
    x = opd.tile(src, what, "src")
    values_t, index_t = _ins.destination(val_dst, what, ("sbuf",)), _ins.destination(idx_dst, what, ("sbuf",))
    opd.need_buffer(what, "src", x, ("sbuf",))
    opd.need_dtype(what, "src", x, (bfloat16,))
    opd.need_dtype(what, "val_dst", values_t, (bfloat16,))
    opd.need_dtype(what, "idx_dst", index_t, (uint32,))
    parts, k, columns = x.shape[0], opd.rows(values_t.data).shape[1], opd.rows(x.data).shape[1]
    if parts % _TOPK_GROUP or values_t.shape[0] != parts or index_t.shape[0] != parts:
        raise NKIError("topk-layout", f"{what}: src, val_dst and idx_dst need the same partitions, a multiple of 16; "
                       f"got {x.shape}, {values_t.shape}, {index_t.shape}")
    if not 8 <= n < 65536 or not 1 <= k <= n or columns * _TOPK_GROUP < n or opd.rows(index_t.data).shape[1] != k:
        raise NKIError("topk-layout", f"{what}: needs 8 <= n < 65536, 1 <= k <= n (k = val_dst's free size {k}, "
                       f"idx_dst alike) and src columns * 16 >= n; got n={n}, src {x.shape}")
    groups = parts // _TOPK_GROUP
    snakes = opd.rows(opd.fp32(x, what)).reshape(groups, _TOPK_GROUP, columns).transpose(0, 2, 1)
    snakes = snakes.reshape(groups, -1)[:, :n]
    best = np.argsort(-snakes, axis=1, kind="stable")[:, :k][:, ::-1]  # k largest, ascending
    slot = np.arange(k)
    part = np.arange(groups)[:, None] * _TOPK_GROUP + slot % _TOPK_GROUP
    col = np.broadcast_to(slot // _TOPK_GROUP, part.shape)
    for target, result in ((values_t, np.take_along_axis(snakes, best, axis=1)), (index_t, best)):
        merged = opd.rows(target.data).copy()
        merged[part, col] = _ins._round(result, target.dtype, current().fp32_compute)
        target.write(Ellipsis, merged.reshape(target.shape))
    _ins._record_lanes(cm.GPSIMD, what, x.shape, x.dtype, 4)
    return values_t, index_t
