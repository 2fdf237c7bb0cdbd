"""`nki.isa` (nisa): single engine instructions."""
from __future__ import annotations

from typing import Any

from .simulator import instructions as _ins
from .simulator.cost_model import GPSIMD, SCALAR, TENSOR, VECTOR
from .simulator.ops import op_name

tensor_engine, vector_engine, scalar_engine, gpsimd_engine = TENSOR, VECTOR, SCALAR, GPSIMD
unknown_engine = None


def nc_matmul(stationary: Any, moving: Any, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, mask: Any = None, **_: Any) -> Any:
    """TensorE: stationary[K<=128, M<=128]^T @ moving[K, N<=512] -> PSUM [M, N] fp32."""
    return _ins.matmul(stationary, moving)


def nc_transpose(data: Any, engine: Any = None, mask: Any = None, dtype: Any = None) -> Any:
    """TensorE transpose of a [P, F<=128] SBUF tile into PSUM."""
    return _ins.transpose(data, dtype)


def activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, mask: Any = None,
               dtype: Any = None) -> Any:
    """ScalarE: op(data * scale + bias); bias and scale are scalars or [P, 1] tiles."""
    return _ins.activation(op, data, bias, scale, dtype)


def tensor_tensor(data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None) -> Any:
    """VectorE: op(data1, data2) elementwise."""
    return _ins.binary(op_name(op), data1, data2, dtype)


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, dtype: Any = None,
                  mask: Any = None) -> Any:
    """VectorE: (data op0 operand0) op1 operand1 with scalar or [P, 1] operands."""
    return _ins.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, dtype)


def tensor_reduce(op: Any, data: Any, axis: Any, keepdims: bool = False, negate: bool = False,
                  dtype: Any = None, mask: Any = None) -> Any:
    """VectorE reduction (op = nl.add / nl.maximum / nl.minimum / nl.multiply) along free axes."""
    return _ins.reduce(op, data, axis, keepdims, dtype, negate)


def tensor_copy(src: Any, dtype: Any = None, engine: Any = None, mask: Any = None) -> Any:
    """Copy a tile into a new SBUF tile (VectorE unless another engine is given)."""
    return _ins.copy(src, dtype, engine=engine or VECTOR)


def dma_copy(dst: Any, src: Any, mask: Any = None, **_: Any) -> None:
    """DMA between HBM tensors / slices and SBUF tiles."""
    _ins.dma_copy(dst, src, mask)


def iota(expr: Any, dtype: Any, mask: Any = None) -> Any:
    """GpSimd: a tile holding the values of an index expression."""
    return _ins.iota(expr, dtype)


def memset(shape: Any, value: Any, dtype: Any, mask: Any = None, engine: Any = None) -> Any:
    """GpSimd: a new SBUF tile filled with `value`."""
    return _ins.memset(shape, value, dtype)
