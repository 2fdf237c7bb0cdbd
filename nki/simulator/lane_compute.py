"""Fused lane-engine compute: an elementwise pipeline whose result is also reduced per partition
into the engine's accumulator registers (activate2 on ScalarE; exponential, tensor_scalar_reduce on
VectorE), scalar_tensor_tensor and reciprocal. Reductions read the fp32 results before the cast
to the destination dtype."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import promote
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd, registers as regs
from .ops import BINARY, UNARY, op_name, require

_ACTIVATE2_STEPS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
                    ("subtract", "bypass"), ("bypass", "bypass")}
_ARITHMETIC = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "abs_max", "abs_min")


def _step(name: str, value: np.ndarray, operand: Any, reverse: bool) -> np.ndarray:
    """`value op operand` (or `operand op value` when reversed) in fp32."""
    fn = require(name, BINARY, "ALU")
    with np.errstate(all="ignore"):
        return np.asarray(fn(operand, value) if reverse else fn(value, operand), np.float32)


def _arithmetic(op: Any, what: str, role: str) -> str:
    name = op_name(op)
    if name not in _ARITHMETIC:
        raise NKIError("unsupported-op", f"{what}: {role} must be an arithmetic operator "
                       f"({', '.join(_ARITHMETIC)}), got {op!r}")
    return name


def _activate(name: str, values: np.ndarray, relu_param: Any) -> np.ndarray:
    if name == "prelu":  # the parameterised activation: slope relu_param below zero
        return np.where(values >= 0, values, values * relu_param).astype(np.float32)
    fn, _ = require(name, UNARY, "activation")
    with np.errstate(all="ignore"):
        return np.asarray(fn(values), np.float32)


def activate2(op: Any, data: Any, imm0: Any, imm1: Any, op0: Any, op1: Any, relu_param: Any = 0.0,
              reverse0: bool = False, reverse1: bool = False, reduce_op: Any = None, reduce_res: Any = None,
              reduce_cmd: Any = "idle", dst: Any = None, engine: str = cm.SCALAR) -> Any:
    """ScalarE (or GpSimd, without reduction; NeuronCore-v4+): dst = op((data op0 imm0) op1 imm1),
    optionally reduced into the ScalarE registers with reduce_op (add, max, min, abs_max, abs_min)."""
    what = "activate2"
    opd.need_generation(what, 4)
    reducing = getattr(reduce_cmd, "name", reduce_cmd) != "idle" or reduce_res is not None
    if engine not in (cm.SCALAR, cm.GPSIMD) or (engine == cm.GPSIMD and reducing):
        raise NKIError("engine", f"{what} runs on ScalarE, or on GpSimd without reduce_cmd / reduce_res; got "
                       f"engine {engine}")
    x = opd.tile(data, what, "data")
    steps = (op_name(op0), op_name(op1))
    if steps not in _ACTIVATE2_STEPS:
        raise NKIError("unsupported-op", f"{what}: (op0, op1) must be one of "
                       f"{', '.join(str(s) for s in sorted(_ACTIVATE2_STEPS))} (nl.bypass skips a step), got {steps}")
    parts = x.shape[0]
    values = opd.fp32(x, what)
    for name, imm, reverse, role in ((steps[0], imm0, reverse0, "imm0"), (steps[1], imm1, reverse1, "imm1")):
        if name != "bypass":
            values = _step(name, values, _broadcast(opd.per_partition(imm, parts, what, role), values), reverse)
    slope = _broadcast(opd.per_partition(relu_param, parts, what, "relu_param"), values)
    out = _activate(op_name(op), values, slope)
    tile = _ins.emit(out, x.dtype, dst, what)
    if reducing:
        name = regs.reducer(reduce_op if reduce_op is not None else "add",
                            ("add", "maximum", "minimum", "abs_max", "abs_min"), what)
        regs.accumulate(cm.SCALAR, reduce_cmd, name, regs.free_reduce(name, out), parts, what)
        regs.read_out(cm.SCALAR, parts, reduce_res, what)
    _ins._record_lanes(engine, f"activate2[{op_name(op)}]", x.shape, tile.dtype)
    return tile


def _broadcast(operand: Any, values: np.ndarray) -> Any:
    """A [P, 1] operand shaped to broadcast against [P, ...] values (scalars stay scalars)."""
    return _ins.align_partitions([operand, values])[0] if isinstance(operand, np.ndarray) else operand


def exponential(src: Any, max_value: Any = 0.0, reduce_res: Any = None, reduce_cmd: Any = "idle",
                reduce_init: Any = 0.0, dst: Any = None) -> Any:
    """VectorE (NeuronCore-v4+): dst = exp(src - max_value); with reduce_cmd the exponentials are
    summed into the VectorE registers (load_reduce starts from reduce_init)."""
    what = "exponential"
    opd.need_generation(what, 4)
    x = opd.tile(src, what, "src")
    command = getattr(reduce_cmd, "name", reduce_cmd)
    if command != "load_reduce" and reduce_init not in (None, 0, 0.0):
        raise NKIError("reduce-init", f"{what}: reduce_init is only read with reduce_cmd=load_reduce; leave it 0.0")
    parts = x.shape[0]
    values = opd.fp32(x, what)
    shift = _broadcast(opd.per_partition(max_value, parts, what, "max_value"), values)
    with np.errstate(all="ignore"):
        out = np.exp(values - shift).astype(np.float32)
    tile = _ins.emit(out, x.dtype, dst, what)
    init = None if command != "load_reduce" else opd.per_partition(reduce_init, parts, what, "reduce_init")
    regs.accumulate(cm.VECTOR, reduce_cmd, "add", regs.free_reduce("add", out), parts, what, init)
    regs.read_out(cm.VECTOR, parts, reduce_res, what)
    _ins._record_lanes(cm.VECTOR, what, x.shape, tile.dtype)
    return tile


def reciprocal(data: Any, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: 1 / data elementwise."""
    return _ins.unary("reciprocal", opd.tile(data, "reciprocal", "data"), dtype, cm.VECTOR, dst)


def scalar_tensor_tensor(data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool = False,
                         reverse1: bool = False, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: (data op0 operand0) op1 operand1, operand0 a scalar or [P, 1] tile, operand1 a tile
    with data's layout."""
    what = "scalar_tensor_tensor"
    x, other = opd.tile(data, what, "data"), opd.tile(operand1, what, "operand1")
    opd.same_layout(what, x, operand1=other)
    if x.buffer == other.buffer == "psum":
        raise NKIError("psum-operands", f"{what}: data and operand1 cannot both be in PSUM: copy one to SBUF")
    first, second = _arithmetic(op0, what, "op0"), _arithmetic(op1, what, "op1")
    values = opd.fp32(x, what)
    values = _step(first, values, _broadcast(opd.per_partition(operand0, x.shape[0], what, "operand0"), values),
                   reverse0)
    out = _step(second, values, opd.fp32(other, what).reshape(values.shape), reverse1)
    tile = _ins.emit(out, opd.new_dtype(dtype, promote([x.dtype, other.dtype])), dst, what)
    _ins._record_lanes(cm.VECTOR, f"{what}[{first},{second}]", x.shape, tile.dtype, 2, tile_inputs=2)
    return tile


def tensor_scalar_reduce(data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any = None,
                         reverse0: bool = False, reduce_cmd: Any = "reset_reduce", reduce_init: Any = None,
                         dst: Any = None, dtype: Any = None) -> Any:
    """VectorE: dst = data op0 operand0, reduced along the free axes with reduce_op (add, multiply,
    max, min) into the VectorE registers as `reduce_cmd` says; reduce_res receives them."""
    what = "tensor_scalar_reduce"
    x = opd.tile(data, what, "data")
    name = regs.reducer(reduce_op, ("add", "multiply", "maximum", "minimum"), what)
    parts = x.shape[0]
    values = opd.fp32(x, what)
    operand = _broadcast(opd.per_partition(operand0, parts, what, "operand0"), values)
    out = _step(_arithmetic(op0, what, "op0"), values, operand, reverse0)
    tile = _ins.emit(out, opd.new_dtype(dtype, x.dtype), dst, what)
    init = None if reduce_init is None else opd.per_partition(reduce_init, parts, what, "reduce_init")
    regs.accumulate(cm.VECTOR, reduce_cmd, name, regs.free_reduce(name, out), parts, what, init)
    regs.read_out(cm.VECTOR, parts, reduce_res, what)
    _ins._record_lanes(cm.VECTOR, f"{what}[{op_name(op0)},{name}]", x.shape, tile.dtype)
    return tile
