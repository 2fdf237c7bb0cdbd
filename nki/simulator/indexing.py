"""Index-producing and partition-moving instructions: nonzero_with_count and sequence_bounds
(GpSimd) and nc_stream_shuffle (VectorE cross-partition moves within 32-partition quadrants)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import float32, int32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd
from .context import current

_GPSIMD_CORE_PARTITIONS = 16  # each GpSimd core serves 16 partitions and works on its first one
_QUADRANT = 32
_UNCHANGED = 255


def nonzero_with_count(src: Any, dst: Any, index_offset: int = 0, padding_val: int = -1) -> Any:
    """GpSimd (NeuronCore-v3+): on partitions 0, 16, ..., 112 only, dst = the positions (+ index_offset)
    of src's nonzero elements, then padding_val, then their count (dst has one element more)."""
    what = "nonzero_with_count"
    x = opd.tile(src, what, "src")
    target = _ins.destination(dst, what, ("sbuf",))
    opd.need_buffer(what, "src", x, ("sbuf",))
    opd.need_dtype(what, "src", x, (float32, int32))
    opd.need_dtype(what, "dst", target, (int32,))
    values, out = opd.rows(opd.fp32(x, what)), opd.rows(target.data).copy()
    if target.shape[0] != x.shape[0] or out.shape[1] != values.shape[1] + 1:
        raise NKIError("shape-mismatch", f"{what}: dst needs src's partitions and one element more per partition "
                       f"(for the count); got src {x.shape}, dst {target.shape}")
    served = np.arange(0, x.shape[0], _GPSIMD_CORE_PARTITIONS)
    nonzero = values[served] != 0
    count = nonzero.sum(axis=1)
    order = np.argsort(~nonzero, axis=1, kind="stable")  # nonzero positions first, in order
    slots = np.arange(values.shape[1])[None, :]
    out[served, :-1] = np.where(slots < count[:, None], order + int(index_offset), int(padding_val))
    out[served, -1] = count
    target.write(Ellipsis, out.reshape(target.shape).astype(target.dtype))
    _ins._record_lanes(cm.GPSIMD, what, x.shape, target.dtype)
    return target


def sequence_bounds(segment_ids: Any, dst: Any = None, dtype: Any = None) -> Any:
    """GpSimd: for segment_ids [1, n], dst [1, 2, n] holds each element's segment start and end
    (exclusive) index; a segment is a run of equal nonzero ids, id 0 is padding (start n, end -1)."""
    what = "sequence_bounds"
    x = opd.tile(segment_ids, what, "segment_ids")
    opd.need_dtype(what, "segment_ids", x, (float32, int32))
    if x.shape[0] != 1:
        raise NKIError("partition-dim", f"{what} takes segment ids on one partition ([1, n]), got {x.shape}")
    ids = opd.rows(opd.fp32(x, what))
    n = ids.shape[1]
    position = np.arange(n)
    starts_run = np.concatenate([np.ones((1, 1), bool), ids[:, 1:] != ids[:, :-1]], axis=1)
    ends_run = np.concatenate([ids[:, 1:] != ids[:, :-1], np.ones((1, 1), bool)], axis=1)
    start = np.maximum.accumulate(np.where(starts_run, position, 0), axis=1)
    end = np.minimum.accumulate(np.where(ends_run, position + 1, n)[:, ::-1], axis=1)[:, ::-1]
    padding = ids == 0
    bounds = np.stack([np.where(padding, n, start), np.where(padding, -1, end)], axis=1)
    out_dtype = opd.new_dtype(dtype, x.dtype)
    if dst is not None:
        opd.need_dtype(what, "dst", _ins.destination(dst, what), (float32, int32))
    tile = _ins.emit(bounds.astype(np.float32), out_dtype, dst, what)
    _ins._record_lanes(cm.GPSIMD, what, x.shape, tile.dtype)
    return tile


def nc_stream_shuffle(src: Any, dst: Any, shuffle_mask: Any) -> Any:
    """VectorE: within each quadrant of 32 partitions, dst partition i takes src partition
    shuffle_mask[i] of the same quadrant (255 leaves dst partition i unchanged)."""
    what = "nc_stream_shuffle"
    x = opd.tile(src, what, "src")
    target = _ins.destination(dst, what)
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != _QUADRANT or any(not (0 <= m < _QUADRANT or m == _UNCHANGED) for m in mask):
        raise NKIError("shuffle-mask", f"{what}: shuffle_mask must list 32 source partitions (0..31, or 255 to "
                       f"leave a partition unchanged), got {shuffle_mask}")
    if x.dtype != target.dtype or opd.rows(x.data).shape[1] != opd.rows(target.data).shape[1]:
        raise NKIError("shape-mismatch", f"{what}: src and dst need one dtype and the same elements per partition; "
                       f"got {x.dtype} {x.shape} and {target.dtype} {target.shape}")
    out = opd.rows(target.data).copy()
    moved = np.arange(target.shape[0])
    lane = np.asarray(mask)[moved % _QUADRANT]
    moved = moved[lane != _UNCHANGED]
    source = moved - moved % _QUADRANT + lane[lane != _UNCHANGED]
    if source.size and source.max() >= x.shape[0]:
        raise NKIError("shuffle-mask", f"{what}: shuffle_mask reads partition {source.max()} of a src with "
                       f"{x.shape[0]} partitions")
    out[moved] = opd.rows(x.data)[source]  # one dtype: a bit-exact move
    target.write(Ellipsis, _ins._round(out.reshape(target.shape), target.dtype, current().fp32_compute))
    _ins._record_lanes(cm.VECTOR, what, x.shape, x.dtype)
    return target
