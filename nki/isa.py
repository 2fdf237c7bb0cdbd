"""`nki.isa` (nisa): single engine instructions of the current NKI (Neuron SDK 2.30 and later).

Instructions write into a destination tile given first (`dst`) and return it. The return-a-tile
spelling of SDK 2.26 and earlier is `nki.legacy.isa` (importable as `neuronxcc.nki.isa`, see
docs/nki.md); both run the same simulator instructions.
"""
from __future__ import annotations

import enum
import warnings
from typing import Any

from .errors import NKIError as _NKIError
from .simulator import (
    cross_core as _cross_core,
    data_movement as _moves,
    indexing as _indexing,
    instructions as _ins,
    lane_compute as _lane,
    microscaling as _mx,
    prng as _prng,
    ranking as _ranking,
    rules as _rules,
    scalar_registers as _sregs,
    scans as _scans,
    selection as _selection,
    statistics as _statistics,
)
from .simulator.context import current as _current
from .simulator.cost_model import GPSIMD as _GPSIMD, SCALAR as _SCALAR, TENSOR as _TENSOR, VECTOR as _VECTOR
from .simulator.operands import FP32_MIN as _FP32_MIN, GENERATIONS as _GENERATIONS
from .simulator.ops import op_name as _op_name
from .simulator.registers import reduce_into_registers as _reduce_into_registers
from .simulator.report import InstructionRecord as NkiInstruction  # noqa: F401  (the record of an issued instruction)


class engine(enum.Enum):
    """Engine an instruction runs on (`engine=` argument)."""

    unknown = None
    tensor = _TENSOR
    vector = _VECTOR
    scalar = _SCALAR
    gpsimd = _GPSIMD
    activation = _SCALAR  # the published alias of the Scalar Engine
    sync = "SyncE"
    dma = "DMA"


class reduce_cmd(enum.Enum):
    """What an instruction does with its engine's per-partition reduction registers."""

    idle = 0          # leave the registers alone
    reset = 1         # zero them
    reduce = 2        # add this instruction's reduction to them
    reset_reduce = 3  # zero them, then add this instruction's reduction
    load_reduce = 4   # load them, then add (not simulated: raises)


class dge_mode(enum.Enum):
    """DMA descriptor generation mode (no effect on simulated results)."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):
    """Out-of-bounds rows of an indirect DMA (ap(vector_offset=...)): raise (default) or skip them."""

    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    """TensorE performance mode (double_row: FP8 double rate on NeuronCore-v3+; results unchanged)."""

    none = 0
    double_row = 1
    double_column = 2
    double_row_gen3 = 3


class nc_version(enum.IntEnum):
    """NeuronCore generation."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def _engine(value: Any, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, engine):
        return value.value or default
    return value if isinstance(value, str) else default


def _need(name: str, **operands: Any) -> None:
    """Refuse calls that miss an operand, saying which: the usual cause is the SDK 2.26 spelling."""
    missing = [k for k, v in operands.items() if v is None]
    if missing:
        raise _NKIError("dst", f"nki.isa.{name} needs {', '.join(missing)}: current NKI instructions write into "
                       f"a destination given first (nisa.{name}(dst, ...)); kernels written for the "
                       f"return-a-tile form of Neuron SDK 2.26 and earlier import neuronxcc.nki (the opt-in "
                       f"alias in docs/nki.md) or nki.legacy")


# ----------------------------------------------------------------------------- TensorE
def nc_matmul(dst: Any = None, stationary: Any = None, moving: Any = None, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: bool | None = None,
              tile_position: Any = (), tile_size: Any = (), perf_mode: Any = None, name: str | None = None) -> Any:
    """TensorE: dst[M, N] (PSUM, fp32) = stationary[K<=128, M<=128]^T @ moving[K, N<=512].

    The product accumulates onto dst unless `accumulate=False` (PSUM accumulation);
    `is_transpose=True` is the PE-array transpose (moving is an identity, so dst = stationary^T),
    which overwrites dst in its own dtype."""
    _need("nc_matmul", dst=dst, stationary=stationary, moving=moving)
    if is_transpose:
        return _ins.matmul(stationary, moving, dst=dst, accumulate=False)
    return _ins.matmul(stationary, moving, dst=dst, accumulate=accumulate)


def nc_transpose(dst: Any = None, data: Any = None, engine: Any = None, name: str | None = None) -> Any:
    """Transpose data[P, F] into dst[F, P]: on TensorE into PSUM, on VectorE (<= 32 x 32) into SBUF."""
    _need("nc_transpose", dst=dst, data=data)
    return _ins.transpose(data, dst=dst)


# ----------------------------------------------------------------------------- ScalarE
def activation(dst: Any = None, op: Any = None, data: Any = None, bias: Any = None, scale: Any = 1.0,
               reduce_op: Any = None, reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
               engine: Any = None, name: str | None = None) -> Any:
    """ScalarE: dst = op(data * scale + bias); bias/scale are scalars or [P, 1] tiles.

    With `reduce_op=nl.add` the activated values are also summed along the free axes into the
    engine's 128 reduction registers as `reduce_cmd` says, and `reduce_res` ([P, 1]) receives
    the registers."""
    _need("activation", dst=dst, op=op, data=data)
    out = _ins.activation(op, data, bias, scale, dst=dst)
    _reduce_into_registers(_SCALAR, reduce_cmd, reduce_op, out, reduce_res, "activation")
    return out


def activation_reduce(dst: Any = None, op: Any = None, data: Any = None, reduce_op: Any = None,
                      reduce_res: Any = None, bias: Any = None, scale: Any = 1.0, name: str | None = None) -> Any:
    """`activation` with `reduce_cmd=reset_reduce`: reduce_res receives the free-axis sum."""
    _need("activation_reduce", dst=dst, op=op, data=data, reduce_op=reduce_op, reduce_res=reduce_res)
    return activation(dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce)


# ----------------------------------------------------------------------------- VectorE / GpSimd
def tensor_tensor(dst: Any = None, data1: Any = None, data2: Any = None, op: Any = None, engine: Any = None,
                  name: str | None = None) -> Any:
    """VectorE (or GpSimd): dst = op(data1, data2) elementwise."""
    _need("tensor_tensor", dst=dst, data1=data1, data2=data2, op=op)
    return _ins.binary(_op_name(op), data1, data2, dst=dst, engine=_engine(engine, _VECTOR))


def tensor_scalar(dst: Any = None, data: Any = None, op0: Any = None, operand0: Any = None,
                  reverse0: bool = False, op1: Any = None, operand1: Any = None, reverse1: bool = False,
                  engine: Any = None, name: str | None = None) -> Any:
    """dst = (data op0 operand0) op1 operand1; operands are scalars or [P, 1] tiles."""
    _need("tensor_scalar", dst=dst, data=data, op0=op0, operand0=operand0)
    return _ins.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, dst=dst,
                              engine=_engine(engine, _VECTOR))


def tensor_reduce(dst: Any = None, op: Any = None, data: Any = None, axis: Any = None, negate: bool = False,
                  keepdims: bool = False, name: str | None = None) -> Any:
    """VectorE: dst = op-reduction of data along free `axis` (nl.add / nl.maximum / nl.minimum / ...)."""
    _need("tensor_reduce", dst=dst, op=op, data=data, axis=axis)
    return _ins.reduce(op, data, _rules.isa_reduce_axes(axis, len(data.shape)), keepdims, negate=negate, dst=dst)


def tensor_copy(dst: Any = None, src: Any = None, engine: Any = None, name: str | None = None) -> Any:
    """Copy src into dst, converting to dst's dtype (VectorE unless another engine is given)."""
    _need("tensor_copy", dst=dst, src=src)
    return _ins.copy(src, dst=dst, engine=_engine(engine, _VECTOR))


def iota(dst: Any = None, pattern: Any = None, offset: int = 0, channel_multiplier: int = 0, name: str | None = None,
         expr: Any = None) -> Any:
    """GpSimd: dst[p, ...] = offset + p * channel_multiplier + sum_k i_k * step_k over the pattern
    [[step, num], ...] (outermost first, at most 4 pairs; nums multiply to dst's elements per partition),
    in int32 converted to dst's dtype. The index-expression form `iota(dst, expr)` (e.g.
    nl.arange(128)[:, None] * 4, as in SDK 2.26) writes the expression's values instead."""
    if expr is None and not isinstance(pattern, (list, tuple)):
        pattern, expr = None, pattern  # the second argument is an index expression, not a pattern
    if expr is None:
        _need("iota", dst=dst, pattern=pattern)
        return _selection.iota(dst, pattern, offset, channel_multiplier)
    _need("iota", dst=dst, expr=expr)
    if pattern is not None or offset or channel_multiplier:
        raise _NKIError("iota-form", "nki.isa.iota takes either an index expression (iota(dst, expr)) or an access "
                        "pattern (iota(dst, pattern=[[step, num], ...], offset=..., channel_multiplier=...)), not "
                        "both: add the offset to the expression")
    return _ins.iota(expr, dst=dst)


def memset(dst: Any = None, value: Any = None, engine: Any = None, name: str | None = None) -> Any:
    """Fill dst with `value` (GpSimd unless another engine is given)."""
    _need("memset", dst=dst, value=value)
    return _ins.memset(None, value, None, dst=dst, engine=_engine(engine, _GPSIMD))


# ----------------------------------------------------------------------------- DMA
def _skips(mode: Any) -> bool:
    """`oob_mode=oob_mode.skip` (or "skip"): out-of-bounds rows of an indirect access are skipped."""
    return getattr(mode, "name", mode) == "skip"


def dma_copy(dst: Any = None, src: Any = None, dst_rmw_op: Any = None, oob_mode: Any = None,
             dge_mode: Any = None, name: str | None = None, **_: Any) -> Any:
    """DMA between HBM tensors / slices / indirect accesses and SBUF tiles (any direction);
    `dst_rmw_op=nl.add` adds src to dst (fp32), `oob_mode=skip` skips out-of-bounds indirect rows."""
    _need("dma_copy", dst=dst, src=src)
    _moves.dma_copy(dst, src, dst_rmw_op, _skips(oob_mode))
    return dst


# ----------------------------------------------------------------------------- selection, scans, statistics, random
def tensor_copy_predicated(dst: Any = None, src: Any = None, predicate: Any = None, reverse_pred: bool = False,
                           name: str | None = None) -> Any:
    """VectorE: copy src (a tile of dst's dtype, or a scalar) into dst where predicate (uint8/16/32)
    is nonzero, or zero with reverse_pred; dst keeps its other values."""
    _need("tensor_copy_predicated", dst=dst, src=src, predicate=predicate)
    return _selection.tensor_copy_predicated(src, predicate, dst, reverse_pred)


def affine_select(dst: Any = None, pattern: Any = None, channel_multiplier: int = 0, on_true_tile: Any = None,
                  on_false_value: float = 0.0, cmp_op: Any = "equal", offset: int = 0, name: str | None = None) -> Any:
    """GpSimd: dst = on_true_tile where cmp_op(offset + partition * channel_multiplier + pattern terms, 0),
    else on_false_value; pattern is [[step, num], ...] (outermost first), as in nisa.iota."""
    _need("affine_select", dst=dst, pattern=pattern, on_true_tile=on_true_tile)
    return _selection.affine_select(pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset, dst)


def range_select(dst: Any = None, on_true_tile: Any = None, comp_op0: Any = None, comp_op1: Any = None,
                 bound0: Any = None, bound1: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.reset_reduce,
                 reduce_res: Any = None, reduce_op: Any = "maximum", range_start: int = 0,
                 on_false_value: float = _FP32_MIN, name: str | None = None) -> Any:
    """VectorE: keep on_true_tile where comp_op0(i, bound0) and comp_op1(i, bound1) for the free index
    i + range_start, else _FP32_MIN; the per-partition max goes to the VectorE registers / reduce_res."""
    _need("range_select", dst=dst, on_true_tile=on_true_tile, comp_op0=comp_op0, comp_op1=comp_op1,
          bound0=bound0, bound1=bound1)
    return _selection.range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res,
                                   reduce_op, range_start, on_false_value, dst)


def select_reduce(dst: Any = None, predicate: Any = None, on_true: Any = None, on_false: Any = None,
                  reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_op: Any = "maximum",
                  reverse_pred: bool = False, name: str | None = None) -> Any:
    """VectorE: dst = on_true where predicate, else on_false (scalar or [P, 1]); the per-partition max
    goes to the VectorE registers as reduce_cmd says, and reduce_res receives them."""
    _need("select_reduce", dst=dst, predicate=predicate, on_true=on_true, on_false=on_false)
    return _selection.select_reduce(predicate, on_true, on_false, dst, reduce_res, reduce_cmd, reduce_op,
                                    reverse_pred)


def tensor_tensor_scan(dst: Any = None, data0: Any = None, data1: Any = None, initial: Any = None, op0: Any = None,
                       op1: Any = None, reverse0: bool = False, reverse1: bool = False, name: str | None = None) -> Any:
    """VectorE scan per partition: dst[i] = op1(op0(data0[i], dst[i-1]), data1[i]), dst[-1] = initial."""
    _need("tensor_tensor_scan", dst=dst, data0=data0, data1=data1, initial=initial, op0=op0, op1=op1)
    return _scans.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0, reverse1, dst)


def tensor_scalar_cumulative(dst: Any = None, src: Any = None, op0: Any = None, op1: Any = None, imm0: Any = None,
                             imm1: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.reset_reduce,
                             name: str | None = None) -> Any:
    """VectorE: running reg = op1(src[i] op0 imm0, reg) per partition written to dst; reg starts from
    the VectorE registers (reset to op1's identity, kept, or loaded from imm1)."""
    _need("tensor_scalar_cumulative", dst=dst, src=src, op0=op0, op1=op1, imm0=imm0)
    return _scans.tensor_scalar_cumulative(src, op0, op1, imm0, imm1, reduce_cmd, dst=dst)


def bn_stats(dst: Any = None, data: Any = None, name: str | None = None) -> Any:
    """VectorE: (count, mean, variance * count) of the even then the odd elements per partition (6 values)."""
    _need("bn_stats", dst=dst, data=data)
    return _statistics.bn_stats(data, dst)


def bn_aggr(dst: Any = None, data: Any = None, name: str | None = None) -> Any:
    """VectorE: mean and variance per partition from one or more bn_stats results (2 values)."""
    _need("bn_aggr", dst=dst, data=data)
    return _statistics.bn_aggr(data, dst)


def tensor_partition_reduce(dst: Any = None, op: Any = None, data: Any = None, name: str | None = None) -> Any:
    """GpSimd: reduce data [P, ...] across partitions into dst [1, ...] (add, mean, max, bitwise ops)."""
    _need("tensor_partition_reduce", dst=dst, op=op, data=data)
    return _statistics.tensor_partition_reduce(op, data, dst)


def activate2(dst: Any = None, op: Any = None, data: Any = None, imm0: Any = None, imm1: Any = None,
              op0: Any = None, op1: Any = None, relu_param: Any = 0.0, reverse0: bool = False, reverse1: bool = False,
              reduce_op: Any = None, reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle,
              engine: Any = engine.scalar, name: str | None = None) -> Any:
    """ScalarE (NeuronCore-v4+): dst = op((data op0 imm0) op1 imm1) (nl.bypass skips a step), with an
    optional reduction into the ScalarE registers."""
    _need("activate2", dst=dst, op=op, data=data, op0=op0, op1=op1)
    return _lane.activate2(op, data, imm0, imm1, op0, op1, relu_param, reverse0, reverse1, reduce_op, reduce_res,
                           reduce_cmd, dst, _engine(engine, _SCALAR))


def exponential(dst: Any = None, src: Any = None, max_value: Any = 0.0, reduce_res: Any = None,
                reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_init: Any = 0.0, name: str | None = None) -> Any:
    """VectorE (NeuronCore-v4+): dst = exp(src - max_value), summed into the VectorE registers as
    reduce_cmd says."""
    _need("exponential", dst=dst, src=src)
    return _lane.exponential(src, max_value, reduce_res, reduce_cmd, reduce_init, dst)


def reciprocal(dst: Any = None, data: Any = None, name: str | None = None) -> Any:
    """VectorE: dst = 1 / data."""
    _need("reciprocal", dst=dst, data=data)
    return _lane.reciprocal(data, dst)


def scalar_tensor_tensor(dst: Any = None, data: Any = None, op0: Any = None, operand0: Any = None, op1: Any = None,
                         operand1: Any = None, reverse0: bool = False, reverse1: bool = False,
                         name: str | None = None) -> Any:
    """VectorE: dst = (data op0 operand0) op1 operand1 (operand0 scalar or [P, 1], operand1 a tile)."""
    _need("scalar_tensor_tensor", dst=dst, data=data, op0=op0, operand0=operand0, op1=op1, operand1=operand1)
    return _lane.scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0, reverse1, dst)


def tensor_scalar_reduce(dst: Any = None, data: Any = None, op0: Any = None, operand0: Any = None,
                         reduce_op: Any = None, reduce_res: Any = None, reverse0: bool = False,
                         reduce_cmd: reduce_cmd = reduce_cmd.reset_reduce, reduce_init: Any = None,
                         name: str | None = None) -> Any:
    """VectorE: dst = data op0 operand0, reduced per partition (add, multiply, max, min) into the
    VectorE registers as reduce_cmd says; reduce_res receives them."""
    _need("tensor_scalar_reduce", dst=dst, data=data, op0=op0, operand0=operand0, reduce_op=reduce_op)
    return _lane.tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0, reduce_cmd, reduce_init,
                                      dst)


def max8(dst: Any = None, src: Any = None, name: str | None = None) -> Any:
    """VectorE: the 8 largest values per partition, descending, into dst [P, 8]."""
    _need("max8", dst=dst, src=src)
    return _ranking.max8(src, dst)


def nc_find_index8(dst: Any = None, data: Any = None, vals: Any = None, name: str | None = None) -> Any:
    """VectorE: index of the first occurrence of each of the 8 vals per partition, into dst [P, 8] (uint)."""
    _need("nc_find_index8", dst=dst, data=data, vals=vals)
    return _ranking.nc_find_index8(data, vals, dst)


def nc_match_replace8(dst: Any = None, data: Any = None, vals: Any = None, imm: float | None = None,
                      dst_idx: Any = None, name: str | None = None) -> Any:
    """VectorE: dst = data with the first occurrence of each of the 8 vals replaced by imm; dst_idx
    receives their positions."""
    _need("nc_match_replace8", dst=dst, data=data, vals=vals, imm=imm)
    return _ranking.nc_match_replace8(data, vals, imm, dst_idx, dst)


def topk(val_dst: Any = None, idx_dst: Any = None, src: Any = None, n: int | None = None, sorted: bool = False,
         name: str | None = None) -> Any:
    """GpSimd: top-k (k = val_dst's free size) of each 16-partition snake of src (n bf16 values),
    ascending, written in the snake layout with their snake indices."""
    _need("topk", val_dst=val_dst, idx_dst=idx_dst, src=src, n=n)
    return _ranking.topk(val_dst, idx_dst, src, n, sorted)


def nonzero_with_count(dst: Any = None, src: Any = None, index_offset: int = 0, padding_val: int = -1,
                       name: str | None = None) -> Any:
    """GpSimd: on partitions 0, 16, ..., 112, the positions of src's nonzeros (+ index_offset), padding
    and their count."""
    _need("nonzero_with_count", dst=dst, src=src)
    return _indexing.nonzero_with_count(src, dst, index_offset, padding_val)


def sequence_bounds(dst: Any = None, segment_ids: Any = None, name: str | None = None) -> Any:
    """GpSimd: segment start and (exclusive) end of each element of segment_ids [1, n] into dst [1, 2, n]."""
    _need("sequence_bounds", dst=dst, segment_ids=segment_ids)
    return _indexing.sequence_bounds(segment_ids, dst)


def nc_stream_shuffle(dst: Any = None, src: Any = None, shuffle_mask: Any = None, name: str | None = None) -> Any:
    """VectorE: dst partition i of each 32-partition quadrant = src partition shuffle_mask[i] (255: unchanged)."""
    _need("nc_stream_shuffle", dst=dst, src=src, shuffle_mask=shuffle_mask)
    return _indexing.nc_stream_shuffle(src, dst, shuffle_mask)


def dropout(dst: Any = None, data: Any = None, prob: Any = None, name: str | None = None) -> Any:
    """VectorE: data with each element zeroed with probability prob (scalar or [P, 1]), not rescaled."""
    _need("dropout", dst=dst, data=data, prob=prob)
    return _prng.dropout(data, prob, dst)


def rng(dst: Any = None, engine: Any = engine.unknown, name: str | None = None) -> Any:
    """VectorE (default) or GpSimd: random bits into an integer dst (low bits of 32-bit draws)."""
    _need("rng", dst=dst)
    return _prng.rng(dst, _engine(engine, _VECTOR))


def rand2(dst: Any = None, min: Any = None, max: Any = None, name: str | None = None) -> Any:
    """VectorE (NeuronCore-v4+): uniform random values in [min, max) into dst."""
    _need("rand2", dst=dst, min=min, max=max)
    return _prng.rand2(dst, min, max)


def set_rng_seed(src_seeds: Any = None, name: str | None = None) -> None:
    """Seed the VectorE generator from a [1, 1] 32-bit tile."""
    _need("set_rng_seed", src_seeds=src_seeds)
    _prng.set_rng_seed(src_seeds)


def rand_set_state(src_seeds: Any = None, engine: Any = engine.unknown, name: str | None = None) -> None:
    """Load per-lane generator state from a uint32 SBUF tile [P, 6] (GpSimd) or [P, 24] (VectorE)."""
    _need("rand_set_state", src_seeds=src_seeds)
    _prng.rand_set_state(src_seeds, _engine(engine, None))


def rand_get_state(dst: Any = None, engine: Any = engine.unknown, name: str | None = None) -> Any:
    """Store per-lane generator state into a uint32 tile [P, 6] (GpSimd) or [P, 24] (VectorE)."""
    _need("rand_get_state", dst=dst)
    return _prng.rand_get_state(dst, _engine(engine, None))



# ----------------------------------------------------------------------------- gathers, quantization, registers
VirtualRegister = _sregs.VirtualRegister


def _dge_name(mode: Any) -> str:
    return "unknown" if mode is None else getattr(mode, "name", str(mode))


def nc_matmul_mx(dst: Any = None, stationary: Any = None, moving: Any = None, stationary_scale: Any = None,
                 moving_scale: Any = None, tile_position: Any = None, tile_size: Any = None,
                 accumulate: bool | None = None, name: str | None = None) -> Any:
    """TensorE (NeuronCore-v4): dst[M, N] (PSUM, fp32/bf16) = MX stationary[K, M] x moving[K, N]
    (x4 dtypes, contraction over K partitions x 4 packed values), dequantized with the uint8 /
    float8_e8m0fnu scales; accumulates onto dst unless `accumulate=False`."""
    _need("nc_matmul_mx", dst=dst, stationary=stationary, moving=moving, stationary_scale=stationary_scale,
          moving_scale=moving_scale)
    return _mx.matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position, tile_size,
                         accumulate)


def quantize_mx(dst: Any = None, src: Any = None, dst_scale: Any = None, name: str | None = None) -> Any:
    """VectorE (NeuronCore-v4): quantize bf16/fp16 src [P, F] to MXFP8 dst [P, F/4]
    (float8_e4m3fn_x4 / float8_e5m2_x4) with one scale per 8 partitions x 4 values in dst_scale."""
    _need("quantize_mx", dst=dst, src=src, dst_scale=dst_scale)
    return _mx.quantize_mx(dst, src, dst_scale)


def dma_transpose(dst: Any = None, src: Any = None, axes: Any = None, priority: Any = None, dge_mode: Any = None,
                  oob_mode: Any = None, name: str | None = None) -> Any:
    """DMA: transpose src (HBM, SBUF or indirect HBM rows; 2-d (1, 0), 3-d (2, 1, 0), 4-d (3, 1, 2, 0))
    into SBUF dst."""
    _need("dma_transpose", dst=dst, src=src)
    return _moves.dma_transpose(dst, src, axes, _dge_name(dge_mode), skip=_skips(oob_mode))


def dma_compute(dst: Any = None, srcs: Any = None, reduce_op: Any = None, scales: Any = None,
                unique_indices: bool = True, oob_mode: Any = None, name: str | None = None) -> Any:
    """DMA: dst = srcs[0] + srcs[1] + ... (fp32 inside the DMA engine; HBM or SBUF operands), or the
    scatter / gather read-modify-write of an indirect operand (srcs=[dst, data])."""
    _need("dma_compute", dst=dst, srcs=srcs, reduce_op=reduce_op)
    return _moves.dma_compute(dst, srcs, reduce_op, scales, unique_indices, _skips(oob_mode))


def local_gather(dst: Any = None, src_buffer: Any = None, index: Any = None, num_elem_per_idx: int = 1,
                 num_valid_indices: int | None = None, name: str | None = None) -> Any:
    """GpSimd: every partition of a 16-partition core gathers num_elem_per_idx elements at each of the
    core's uint16 indices (its 16-partition index slice flattened partition-first)."""
    _need("local_gather", dst=dst, src_buffer=src_buffer, index=index)
    return _moves.local_gather(dst, src_buffer, index, num_elem_per_idx, num_valid_indices)


def nc_n_gather(dst: Any = None, data: Any = None, indices: Any = None, name: str | None = None) -> Any:
    """GpSimd: dst[p, ...] = data[p].flatten()[indices[p, ...]] (uint32 indices, per partition)."""
    _need("nc_n_gather", dst=dst, data=data, indices=indices)
    return _moves.gather_flat(dst, data, indices)


def register_alloc(x: int | None = None) -> VirtualRegister:
    """A scalar register, uninitialized or holding the integer x."""
    return _sregs.register_alloc(x)


def register_move(dst: Any, src: Any) -> None:
    """dst register = src (an integer or another register)."""
    _sregs.register_move(dst, src)


def register_load(dst: Any, src: Any) -> None:
    """dst register = the single value of the one-element tensor src (HBM or SBUF)."""
    _sregs.register_load(dst, src)


def register_store(dst: Any, src: Any) -> None:
    """The one-element tensor dst (HBM or SBUF) = the value of register src."""
    _sregs.register_store(dst, src)



# ----------------------------------------------------------------------------- cross-core
class dma_engine(enum.Enum):
    """DMA transfer engine of `sendrecv` (no effect on simulated results)."""

    dma = 0         # shared DMA with CoreBarrier synchronization
    gpsimd_dma = 1  # GpSimd's internal DMA engine for SBUF-to-SBUF swaps


def _deprecated_for_lnc(name: str) -> None:
    # The published reference moved these to nki.lnc; kernels keep working, warned at their line.
    warnings.warn(f"nki.isa.{name} is deprecated: use nki.lnc.{name}", DeprecationWarning, stacklevel=3)


def sendrecv(src: Any = None, dst: Any = None, send_to_rank: Any = None, recv_from_rank: Any = None,
             pipe_id: Any = None, dma_engine: Any = dma_engine.dma, name: str | None = None) -> None:
    """Deprecated spelling of `nki.lnc.sendrecv` (`pipe_id` is ignored)."""
    _need("sendrecv", src=src, dst=dst, send_to_rank=send_to_rank, recv_from_rank=recv_from_rank)
    _deprecated_for_lnc("sendrecv")
    _cross_core.sendrecv(src, dst, send_to_rank, recv_from_rank, "nki.isa.sendrecv")


def sendrecv_compute(src: Any = None, dst: Any = None, send_to_rank: Any = None, recv_from_rank: Any = None,
                     reduce_op: Any = None, name: str | None = None) -> None:
    """Deprecated spelling of `nki.lnc.sendrecv_compute`."""
    _need("sendrecv_compute", src=src, dst=dst, send_to_rank=send_to_rank, recv_from_rank=recv_from_rank,
          reduce_op=reduce_op)
    _deprecated_for_lnc("sendrecv_compute")
    what = "nki.isa.sendrecv_compute"
    _cross_core.sendrecv(src, dst, send_to_rank, recv_from_rank, what, _cross_core.reduce_op(reduce_op, what))


def core_barrier(data: Any = None, cores: Any = None, engine: Any = engine.gpsimd, name: str | None = None) -> None:
    """Deprecated spelling of `nki.lnc.core_barrier`."""
    _need("core_barrier", data=data, cores=cores)
    _deprecated_for_lnc("core_barrier")
    _cross_core.core_barrier(data, cores, _engine(engine, _GPSIMD), "nki.isa.core_barrier")


# ----------------------------------------------------------------------------- target
def get_nc_version() -> nc_version:
    """Generation of the simulated NeuronCore (trn2: gen3, trn3: gen4)."""
    return nc_version(_GENERATIONS.get(_current().config.name, nc_version.gen3))


def get_nc_sub_version() -> int:
    """Stepping of the simulated NeuronCore generation: 0 (the simulator models the base stepping of each)."""
    return 0


# The published validation error is our rule error: `except nisa.NkiValidationError` catches every rule.
NkiValidationError = _NKIError
