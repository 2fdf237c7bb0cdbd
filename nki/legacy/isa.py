"""`neuronxcc.nki.isa` of Neuron SDK 2.26 and earlier: each instruction returns a new tile."""
from __future__ import annotations

from typing import Any

from .. import isa as _isa, lnc as _lnc
from ..errors import NKIError as _NKIError
from ..isa import _engine, dge_mode, get_nc_version, nc_version, oob_mode, reduce_cmd  # noqa: F401
from ..simulator import (
    blocks as _blocks,
    data_movement as _moves,
    indexing as _indexing,
    instructions as _ins,
    lane_compute as _lane,
    prng as _prng,
    ranking as _ranking,
    rules as _rules,
    scans as _scans,
    selection as _selection,
    statistics as _statistics,
)
from ..simulator.cost_model import GPSIMD, SCALAR, TENSOR, VECTOR
from ..simulator.operands import FP32_MIN
from ..simulator.ops import op_name
from ..simulator.registers import reduce_into_registers

engine = _isa.engine
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = TENSOR, VECTOR, SCALAR, GPSIMD
unknown_engine = None


def nc_matmul(stationary: Any, moving: Any, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, mask: Any = None, **_: Any) -> Any:
    """TensorE: stationary[K<=128, M<=128]^T @ moving[K, N<=512] -> new PSUM [M, N] fp32
    (`psum_tile += nc_matmul(...)` accumulates); with `is_transpose` moving is an identity, so the
    product is stationary^T."""
    return _ins.zeroed(mask, _ins.matmul, stationary, moving)


def nc_transpose(data: Any, engine: Any = None, mask: Any = None, dtype: Any = None) -> Any:
    """TensorE transpose of a [P, F<=128] SBUF tile into a new PSUM tile."""
    return _ins.zeroed(mask, _ins.transpose, data, dtype)


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle, mask: Any = None,
               dtype: Any = None, **_: Any) -> Any:
    """ScalarE: op(data * scale + bias); bias and scale are scalars or [P, 1] tiles."""
    out = _ins.masked(mask, _ins.activation, op, data, bias, scale, dtype)
    reduce_into_registers(SCALAR, reduce_cmd, reduce_op, out, reduce_res, "activation")
    return out


def activation_reduce(op: Any, data: Any, reduce_op: Any = None, reduce_res: Any = None, bias: Any = None,
                      scale: Any = 1.0, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """`activation` whose free-axis sum is written into `reduce_res` ([P, 1])."""
    return activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce, mask, dtype)


def tensor_tensor(data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> Any:
    """VectorE (or GpSimd): op(data1, data2) elementwise."""
    return _ins.masked(mask, _ins.binary, op_name(op), data1, data2, dtype, engine=_engine(engine, VECTOR))


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None, mask: Any = None,
                  engine: Any = None, **_: Any) -> Any:
    """(data op0 operand0) op1 operand1 with scalar or [P, 1] operands."""
    return _ins.masked(mask, _ins.tensor_scalar, data, op0, operand0, reverse0, op1, operand1, reverse1, dtype,
                       engine=_engine(engine, VECTOR))


def tensor_reduce(op: Any, data: Any, axis: Any, keepdims: bool = False, negate: bool = False,
                  dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE reduction (op = nl.add / nl.maximum / nl.minimum / nl.multiply) along free axes."""
    return _ins.masked(mask, _ins.reduce, op, data, _rules.isa_reduce_axes(axis, len(data.shape)), keepdims, dtype,
                       negate, result_axes=(0,))


def tensor_copy(src: Any, dtype: Any = None, engine: Any = None, mask: Any = None, **_: Any) -> Any:
    """Copy a tile into a new SBUF tile (VectorE unless another engine is given)."""
    return _ins.masked(mask, _ins.copy, src, dtype, engine=_engine(engine, VECTOR))


def dma_copy(dst: Any, src: Any, mask: Any = None, dst_rmw_op: Any = None,
             oob_mode: Any = None, **_: Any) -> None:  # noqa: F811  (the published keyword shadows the enum)
    """DMA between HBM tensors / slices / indirect accesses and SBUF tiles; `dst_rmw_op` and
    `oob_mode` as in nki.isa (an indirect access takes no `mask=`: rule vector-offset)."""
    if mask is None:
        _moves.dma_copy(dst, src, dst_rmw_op, _isa._skips(oob_mode))
    elif dst_rmw_op is None and oob_mode is None:
        _ins.dma_copy(dst, src, mask)
    else:
        raise _NKIError("unsupported-feature", "dma_copy with mask= and dst_rmw_op= or oob_mode=: apply the mask "
                        "by slicing the operands")


def iota(expr: Any, dtype: Any, mask: Any = None, **_: Any) -> Any:
    """GpSimd: a new tile holding the values of an index expression."""
    return _ins.computed_where(mask, _ins.iota(expr, dtype))


def memset(shape: Any, value: Any, dtype: Any, mask: Any = None, engine: Any = None, **_: Any) -> Any:
    """A new SBUF tile filled with `value` (GpSimd unless another engine is given)."""
    return _ins.computed_where(mask, _ins.memset(shape, value, dtype, engine=_engine(engine, GPSIMD)))


# ----------------------------------------------------------------------------- selection, scans, statistics, random
class fp32:
    """FP32 constants: `fp32.min` is the most negative float32 (range_select's on_false_value)."""

    min = FP32_MIN


def tensor_copy_predicated(src: Any, dst: Any, predicate: Any, reverse_pred: bool = False, mask: Any = None,
                           dtype: Any = None, **_: Any) -> Any:
    """VectorE: copy src into dst where predicate is nonzero (zero with reverse_pred)."""
    return _ins.masked_into(mask, dst, _selection.tensor_copy_predicated, src, predicate, dst, reverse_pred)


def affine_select(pred: Any, on_true_tile: Any, on_false_value: float, mask: Any = None, dtype: Any = None,
                  **_: Any) -> Any:
    """GpSimd: a new tile of on_true_tile where the index expression pred is true, else on_false_value."""
    return _ins.zeroed(mask, _selection.affine_select_expression, pred, on_true_tile, on_false_value, dtype)


def range_select(on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any,
                 reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_res: Any = None, reduce_op: Any = "maximum",
                 range_start: int = 0, on_false_value: float = FP32_MIN, mask: Any = None, dtype: Any = None,
                 **_: Any) -> Any:
    """VectorE: a new tile keeping on_true_tile where both bound comparisons of the free index hold."""
    return _ins.zeroed(mask, _selection.range_select, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd,
                       reduce_res, reduce_op, range_start, on_false_value, dtype=dtype)


def select_reduce(dst: Any, predicate: Any, on_true: Any, on_false: Any, reduce_res: Any = None,
                  reduce_cmd: reduce_cmd = reduce_cmd.idle, reduce_op: Any = "maximum", reverse_pred: bool = False,
                  mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: dst = on_true where predicate, else on_false, with an optional max into reduce_res."""
    return _ins.masked_into(mask, dst, _selection.select_reduce, predicate, on_true, on_false, dst, reduce_res,
                            reduce_cmd, reduce_op, reverse_pred)


def tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE scan per partition into a new tile: r[i] = op1(op0(data0[i], r[i-1]), data1[i])."""
    return _ins.masked(mask, _scans.tensor_tensor_scan, data0, data1, initial, op0, op1, reverse0, reverse1,
                       dtype=dtype)


def tensor_partition_reduce(op: Any, data: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """GpSimd: a new [1, ...] tile reducing data across partitions."""
    return _ins.masked(mask, _statistics.tensor_partition_reduce, op, data, dtype=dtype, result_axes=(1,))


def bn_stats(data: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of (count, mean, variance * count) of the even then odd elements
    (of the elements `mask` keeps)."""
    return _ins.masked(mask, _statistics.bn_stats, data, dtype=dtype, result_axes=(0,))


def bn_aggr(data: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of the mean and variance per partition from bn_stats results."""
    return _ins.masked(mask, _statistics.bn_aggr, data, dtype=dtype, result_axes=(0,))


def reciprocal(data: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of 1 / data."""
    return _ins.masked(mask, _lane.reciprocal, data, dtype=dtype)


def scalar_tensor_tensor(data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool = False,
                         reverse1: bool = False, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of (data op0 operand0) op1 operand1."""
    return _ins.masked(mask, _lane.scalar_tensor_tensor, data, op0, operand0, op1, operand1, reverse0, reverse1,
                       dtype=dtype)


def tensor_scalar_reduce(data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any, reverse0: bool = False,
                         dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of data op0 operand0; reduce_res receives its reduce_op per partition."""
    return _ins.masked(mask, _lane.tensor_scalar_reduce, data, op0, operand0, reduce_op, reduce_res, reverse0,
                       dtype=dtype)


def max8(src: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: a new [P, 8] tile of the 8 largest values per partition, descending."""
    return _ins.masked(mask, _ranking.max8, src, dtype=dtype, result_axes=(0,))


def nc_find_index8(data: Any, vals: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: a new [P, 8] uint32 (or uint16) tile of the first positions of the 8 vals."""
    return _ins.masked(mask, _ranking.nc_find_index8, data, vals, dtype=dtype, result_axes=(0,))


def nc_match_replace8(data: Any, vals: Any, imm: float, dst_idx: Any = None, mask: Any = None, dtype: Any = None,
                      **_: Any) -> Any:
    """VectorE: a new tile of data with the first occurrence of each of the 8 vals replaced by imm."""
    return _ins.masked(mask, _ranking.nc_match_replace8, data, vals, imm, dst_idx, dtype=dtype)


def sequence_bounds(segment_ids: Any, dtype: Any = None, **_: Any) -> Any:
    """GpSimd: a new [1, 2, n] tile of each element's segment start and (exclusive) end."""
    return _indexing.sequence_bounds(segment_ids, dtype=dtype)


def nc_stream_shuffle(src: Any, dst: Any, shuffle_mask: Any, dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE: dst partition i of each quadrant takes src partition shuffle_mask[i] (255: unchanged)."""
    return _ins.masked_into(mask, dst, _indexing.nc_stream_shuffle, src, dst, shuffle_mask)


def dropout(data: Any, prob: Any, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """VectorE: a new tile of data with elements zeroed with probability prob."""
    return _ins.masked(mask, _prng.dropout, data, prob, dtype=dtype)



# ----------------------------------------------------------------------------- gathers, quantization, registers
def dma_transpose(src: Any, axes: Any = None, mask: Any = None, dtype: Any = None, **options: Any) -> Any:
    """DMA: a new SBUF tile holding src (HBM or SBUF) transposed (2-d (1, 0), 3-d (2, 1, 0), 4-d
    (3, 1, 2, 0)), converted to `dtype` if given; `dge_mode=` as in nki.isa."""
    return _ins.zeroed(mask, _moves.dma_transpose, None, src, axes, _isa._dge_name(options.get("dge_mode")), dtype)


def local_gather(src_buffer: Any, index: Any, num_elem_per_idx: int = 1, num_valid_indices: int | None = None,
                 mask: Any = None, **_: Any) -> Any:
    """GpSimd: a new tile [P, num_valid_indices, num_elem_per_idx] gathered per 16-partition core
    at the core's uint16 indices."""
    return _ins.zeroed(mask, _moves.local_gather, None, src_buffer, index, num_elem_per_idx, num_valid_indices)


# ----------------------------------------------------------------------------- SDK 2.27-2.29 additions
# Instructions first documented by SDK 2.27-2.29, whose kernels still called them through
# `neuronxcc.nki.isa`: they only ever had the destination form (`dst=` given), so the legacy module
# exposes the current instructions themselves.
from ..isa import (  # noqa: E402, F401
    dma_compute,
    exponential,
    nc_matmul_mx,
    nc_n_gather,
    nonzero_with_count,
    quantize_mx,
    rand2,
    rand_get_state,
    rand_set_state,
    register_alloc,
    register_load,
    register_move,
    register_store,
    rng,
    set_rng_seed,
    tensor_scalar_cumulative,
)
from ..lnc import core_barrier  # noqa: E402, F401  (nki.isa's spelling warns as deprecated; it did not then)


def sendrecv(src: Any, dst: Any, send_to_rank: int, recv_from_rank: int, pipe_id: Any = None,
             dma_engine: Any = _isa.dma_engine.dma, name: str | None = None) -> None:
    """`nki.lnc.sendrecv` in its SDK 2.27-2.29 spelling (`pipe_id` is ignored)."""
    _lnc.sendrecv(src, dst, send_to_rank, recv_from_rank, dma_engine, name)


# Whole block tensors (nki.simulator.blocks): elementwise instructions run once per block, DMA takes
# them as they are, the others refuse them.
_blocks.guard(globals(),
              elementwise={"activation", "tensor_tensor", "tensor_scalar", "tensor_copy", "reciprocal",
                           "scalar_tensor_tensor"},
              passthrough={"dma_copy", "get_nc_version", "register_alloc", "register_move"})
