"""`neuronxcc.nki.isa` of Neuron SDK 2.26 and earlier: each instruction returns a new tile."""
from __future__ import annotations

from typing import Any

from .. import isa as _isa
from ..isa import _engine, dge_mode, get_nc_version, nc_version, oob_mode, reduce_cmd  # noqa: F401
from ..simulator import instructions as _ins
from ..simulator.cost_model import GPSIMD, SCALAR, TENSOR, VECTOR
from ..simulator.ops import op_name
from ..simulator.registers import reduce_into_registers

engine = _isa.engine
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = TENSOR, VECTOR, SCALAR, GPSIMD
unknown_engine = None


def nc_matmul(stationary: Any, moving: Any, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, mask: Any = None, **_: Any) -> Any:
    """TensorE: stationary[K<=128, M<=128]^T @ moving[K, N<=512] -> new PSUM [M, N] fp32
    (`psum_tile += nc_matmul(...)` accumulates)."""
    if is_transpose:
        return _ins.transpose(moving)
    return _ins.matmul(stationary, moving)


def nc_transpose(data: Any, engine: Any = None, mask: Any = None, dtype: Any = None) -> Any:
    """TensorE transpose of a [P, F<=128] SBUF tile into a new PSUM tile."""
    return _ins.transpose(data, dtype)


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: Any = None, reduce_cmd: reduce_cmd = reduce_cmd.idle, mask: Any = None,
               dtype: Any = None, **_: Any) -> Any:
    """ScalarE: op(data * scale + bias); bias and scale are scalars or [P, 1] tiles."""
    out = _ins.activation(op, data, bias, scale, dtype)
    reduce_into_registers(SCALAR, reduce_cmd, reduce_op, out, reduce_res, "activation")
    return out


def activation_reduce(op: Any, data: Any, reduce_op: Any = None, reduce_res: Any = None, bias: Any = None,
                      scale: Any = 1.0, mask: Any = None, dtype: Any = None, **_: Any) -> Any:
    """`activation` whose free-axis sum is written into `reduce_res` ([P, 1])."""
    return activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce, dtype=dtype)


def tensor_tensor(data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> Any:
    """VectorE (or GpSimd): op(data1, data2) elementwise."""
    return _ins.binary(op_name(op), data1, data2, dtype, engine=_engine(engine, VECTOR))


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None, mask: Any = None,
                  engine: Any = None, **_: Any) -> Any:
    """(data op0 operand0) op1 operand1 with scalar or [P, 1] operands."""
    return _ins.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, dtype,
                              engine=_engine(engine, VECTOR))


def tensor_reduce(op: Any, data: Any, axis: Any, keepdims: bool = False, negate: bool = False,
                  dtype: Any = None, mask: Any = None, **_: Any) -> Any:
    """VectorE reduction (op = nl.add / nl.maximum / nl.minimum / nl.multiply) along free axes."""
    return _ins.reduce(op, data, axis, keepdims, dtype, negate)


def tensor_copy(src: Any, dtype: Any = None, engine: Any = None, mask: Any = None, **_: Any) -> Any:
    """Copy a tile into a new SBUF tile (VectorE unless another engine is given)."""
    return _ins.copy(src, dtype, engine=_engine(engine, VECTOR))


def dma_copy(dst: Any, src: Any, mask: Any = None, **_: Any) -> None:
    """DMA between HBM tensors / slices and SBUF tiles."""
    _ins.dma_copy(dst, src, mask)


def iota(expr: Any, dtype: Any, mask: Any = None, **_: Any) -> Any:
    """GpSimd: a new tile holding the values of an index expression."""
    return _ins.iota(expr, dtype)


def memset(shape: Any, value: Any, dtype: Any, mask: Any = None, engine: Any = None, **_: Any) -> Any:
    """A new SBUF tile filled with `value` (GpSimd unless another engine is given)."""
    return _ins.memset(shape, value, dtype, engine=_engine(engine, GPSIMD))


# ----------------------------------------------------------------------------- selection, scans, statistics, random


# ----------------------------------------------------------------------------- gathers, quantization, registers
