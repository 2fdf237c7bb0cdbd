"""Statistics instructions: per-partition mean / variance (bn_stats, bn_aggr, VectorE) and the
reduction across partitions (tensor_partition_reduce, GpSimd)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import is_float
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd
from .ops import op_name

BN_STATS_FMAX = 512  # nl.tile_size.bn_stats_fmax


def _moments(values: np.ndarray) -> np.ndarray:
    """(count, mean, variance * count) of each row of `values` ([P, n]) as [P, 3]; an empty row is (0, 0, 0)."""
    count = np.float32(values.shape[1])
    if values.shape[1] == 0:
        return np.zeros((values.shape[0], 3), np.float32)
    mean = values.mean(axis=1, dtype=np.float32)
    m2 = np.square(values - mean[:, None]).sum(axis=1, dtype=np.float32)
    return np.stack([np.full_like(mean, count), mean, m2], axis=1)


def bn_stats(data: Any, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: (count, mean, variance * count) of the even, then of the odd elements of each
    partition of `data` (<= 512 elements per partition): 6 values per partition."""
    x = opd.tile(data, "bn_stats", "data")
    values = opd.rows(opd.fp32(x, "bn_stats"))
    if values.shape[1] > BN_STATS_FMAX:
        raise NKIError("bn-stats-fmax", f"bn_stats reads at most {BN_STATS_FMAX} elements per partition "
                       f"(nl.tile_size.bn_stats_fmax), got {values.shape[1]}: run bn_stats on each "
                       f"512-element slice into one stats tile and aggregate them with one bn_aggr")
    stats = np.concatenate([_moments(values[:, 0::2]), _moments(values[:, 1::2])], axis=1)
    out = _ins.emit(stats, opd.new_dtype(dtype, x.dtype), dst, "bn_stats")
    _ins._record_lanes(cm.VECTOR, "bn_stats", x.shape, out.dtype)
    return out


def bn_aggr(data: Any, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: the mean and (population) variance per partition from (count, mean, variance * count)
    triples of one or more bn_stats results: 2 values per partition."""
    x = opd.tile(data, "bn_aggr", "data")
    values = opd.rows(opd.fp32(x, "bn_aggr"))
    if values.shape[1] % 3:
        raise NKIError("bn-aggr-layout", f"bn_aggr reads (count, mean, variance * count) triples: the elements "
                       f"per partition ({values.shape[1]}) must be a multiple of 3")
    triples = values.reshape(values.shape[0], -1, 3)
    count, mean, m2 = triples[..., 0], triples[..., 1], triples[..., 2]
    total = count.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        grand = np.where(total > 0, (count * mean).sum(axis=1) / total, 0.0)
        # Chan et al.: the groups' M2 plus the spread of their means around the grand mean.
        spread = (m2 + count * np.square(mean - grand[:, None])).sum(axis=1)
        variance = np.where(total > 0, spread / total, 0.0)
    out = _ins.emit(np.stack([grand, variance], axis=1).astype(np.float32), opd.new_dtype(dtype, x.dtype), dst,
                    "bn_aggr")
    _ins._record_lanes(cm.VECTOR, "bn_aggr", x.shape, out.dtype)
    return out


_FLOAT_REDUCE = {"add": np.sum, "mean": np.mean, "maximum": np.max}
_BITWISE_REDUCE = {"bitwise_or": np.bitwise_or, "bitwise_and": np.bitwise_and, "bitwise_xor": np.bitwise_xor}


def tensor_partition_reduce(op: Any, data: Any, dst: Any = None, dtype: Any = None) -> Any:
    """GpSimd: reduce `data` [P, ...] across its partitions into [1, ...] (add, mean, max in fp32;
    bitwise_or / bitwise_and / bitwise_xor on the bit patterns of integer tiles)."""
    name = op_name(op)
    x = opd.tile(data, "tensor_partition_reduce", "data")
    if name in _BITWISE_REDUCE:
        if is_float(x.dtype):
            raise NKIError("dtype", f"tensor_partition_reduce[{name}] reads integer bit patterns, got a "
                           f"{x.dtype} tile: use add / max for float data")
        out_values = _BITWISE_REDUCE[name].reduce(x.data, axis=0, keepdims=True)
    elif name in _FLOAT_REDUCE:
        out_values = _FLOAT_REDUCE[name](opd.fp32(x, "tensor_partition_reduce"), axis=0, keepdims=True)
    else:
        raise NKIError("unsupported-op", f"tensor_partition_reduce: op must be one of nl.add, nl.mean, nl.maximum, "
                       f"nl.bitwise_or, nl.bitwise_and, nl.bitwise_xor; got {op!r}")
    out = _ins.emit(out_values, opd.new_dtype(dtype, x.dtype), dst, "tensor_partition_reduce")
    _ins._record_lanes(cm.GPSIMD, f"tensor_partition_reduce[{name}]", x.shape, out.dtype)
    return out
