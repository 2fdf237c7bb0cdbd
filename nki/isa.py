"""`nki.isa` (nisa): single engine instructions of the current NKI (Neuron SDK 2.30 and later).

Instructions write into a destination tile given first (`dst`) and return it. The return-a-tile
spelling of SDK 2.26 and earlier is `nki.legacy.isa` (importable as `neuronxcc.nki.isa`, see
docs/nki.md); both run the same simulator instructions.
"""
from __future__ import annotations

import enum
from typing import Any

from .errors import NKIError
from .simulator import instructions as _ins
from .simulator.cost_model import GPSIMD, SCALAR, TENSOR, VECTOR
from .simulator.ops import op_name
from .simulator.registers import reduce_into_registers


class engine(enum.Enum):
    """Engine an instruction runs on (`engine=` argument)."""

    unknown = None
    tensor = TENSOR
    vector = VECTOR
    scalar = SCALAR
    gpsimd = GPSIMD
    activation = SCALAR  # the published alias of the Scalar Engine
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
    """Out-of-bounds handling of indirect DMA (`error` is the simulated default)."""

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
        raise NKIError("dst", f"nki.isa.{name} needs {', '.join(missing)}: current NKI instructions write into "
                       f"a destination given first (nisa.{name}(dst, ...)); kernels written for the "
                       f"return-a-tile form of Neuron SDK 2.26 and earlier import neuronxcc.nki (the opt-in "
                       f"alias in docs/nki.md) or nki.legacy")


# ----------------------------------------------------------------------------- TensorE
def nc_matmul(dst: Any = None, stationary: Any = None, moving: Any = None, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: bool | None = None,
              tile_position: Any = (), tile_size: Any = (), perf_mode: Any = None, name: str | None = None) -> Any:
    """TensorE: dst[M, N] (PSUM, fp32) = stationary[K<=128, M<=128]^T @ moving[K, N<=512].

    The product accumulates onto dst unless `accumulate=False` (PSUM accumulation);
    `is_transpose=True` makes it a transpose of `moving` (stationary is the identity)."""
    _need("nc_matmul", dst=dst, stationary=stationary, moving=moving)
    if is_transpose:
        return _ins.transpose(moving, dst=dst)
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
    reduce_into_registers(SCALAR, reduce_cmd, reduce_op, out, reduce_res, "activation")
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
    return _ins.binary(op_name(op), data1, data2, dst=dst, engine=_engine(engine, VECTOR))


def tensor_scalar(dst: Any = None, data: Any = None, op0: Any = None, operand0: Any = None,
                  reverse0: bool = False, op1: Any = None, operand1: Any = None, reverse1: bool = False,
                  engine: Any = None, name: str | None = None) -> Any:
    """dst = (data op0 operand0) op1 operand1; operands are scalars or [P, 1] tiles."""
    _need("tensor_scalar", dst=dst, data=data, op0=op0, operand0=operand0)
    return _ins.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, dst=dst,
                              engine=_engine(engine, VECTOR))


def tensor_reduce(dst: Any = None, op: Any = None, data: Any = None, axis: Any = None, negate: bool = False,
                  keepdims: bool = False, name: str | None = None) -> Any:
    """VectorE: dst = op-reduction of data along free `axis` (nl.add / nl.maximum / nl.minimum / ...)."""
    _need("tensor_reduce", dst=dst, op=op, data=data, axis=axis)
    return _ins.reduce(op, data, axis, keepdims, negate=negate, dst=dst)


def tensor_copy(dst: Any = None, src: Any = None, engine: Any = None, name: str | None = None) -> Any:
    """Copy src into dst, converting to dst's dtype (VectorE unless another engine is given)."""
    _need("tensor_copy", dst=dst, src=src)
    return _ins.copy(src, dst=dst, engine=_engine(engine, VECTOR))


def iota(dst: Any = None, expr: Any = None, name: str | None = None, **_: Any) -> Any:
    """GpSimd: dst = the values of an index expression (e.g. nl.arange(128)[:, None] * 4)."""
    _need("iota", dst=dst, expr=expr)
    return _ins.iota(expr, dst=dst)


def memset(dst: Any = None, value: Any = None, engine: Any = None, name: str | None = None) -> Any:
    """Fill dst with `value` (GpSimd unless another engine is given)."""
    _need("memset", dst=dst, value=value)
    return _ins.memset(None, value, None, dst=dst, engine=_engine(engine, GPSIMD))


# ----------------------------------------------------------------------------- DMA
def dma_copy(dst: Any = None, src: Any = None, dst_rmw_op: Any = None, oob_mode: Any = None,
             dge_mode: Any = None, name: str | None = None, **_: Any) -> Any:
    """DMA between HBM tensors / slices and SBUF tiles (any direction)."""
    _need("dma_copy", dst=dst, src=src)
    if dst_rmw_op is not None:
        raise NKIError("unsupported-feature", "dma_copy(dst_rmw_op=...) (read-modify-write DMA) is not simulated: "
                       "load dst, combine with nisa.tensor_tensor and copy back")
    _ins.dma_copy(dst, src, None)
    return dst


# ----------------------------------------------------------------------------- selection, scans, statistics, random


# ----------------------------------------------------------------------------- gathers, quantization, registers


# ----------------------------------------------------------------------------- cross-core


# ----------------------------------------------------------------------------- target
def get_nc_version() -> nc_version:
    """Generation of the simulated NeuronCore (trn2: gen3, trn3: gen4)."""
    from .simulator.context import current
    return nc_version.gen4 if current().config.name == "trn3" else nc_version.gen3


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = TENSOR, VECTOR, SCALAR, GPSIMD
unknown_engine = None
