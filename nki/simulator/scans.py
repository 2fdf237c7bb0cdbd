"""Scans along the free axis of each partition (VectorE): tensor_tensor_scan (a two-operator
recurrence over two tiles) and tensor_scalar_cumulative (a running reduction in the engine's
accumulator registers). Free axes are scanned flattened, in row-major order."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import float32, int32, promote, uint32
from ..errors import NKIError
from . import cost_model as cm, instructions as _ins, operands as opd, registers as regs
from .ops import BINARY, op_name, require

_ARITHMETIC = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "abs_max", "abs_min")


def _arithmetic(op: Any, what: str, allowed: tuple[str, ...] = _ARITHMETIC) -> tuple[str, Any]:
    name = op_name(op)
    if name not in allowed:
        raise NKIError("unsupported-op", f"{what}: {op!r} is not one of the arithmetic operators it takes "
                       f"({', '.join(allowed)})")
    return name, require(name, BINARY, what)


def tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, dst: Any = None, dtype: Any = None) -> Any:
    """VectorE, per partition: r[0] = op1(op0(data0[0], initial), data1[0]) and
    r[i] = op1(op0(data0[i], r[i-1]), data1[i]); reverse0 swaps op0's operands, reverse1 op1's."""
    what = "tensor_tensor_scan"
    a, b = opd.tile(data0, what, "data0"), opd.tile(data1, what, "data1")
    opd.same_layout(what, a, data1=b)
    if a.buffer == b.buffer == "psum":
        raise NKIError("psum-operands", f"{what}: data0 and data1 cannot both be in PSUM: copy one to SBUF")
    (_, f0), (_, f1) = _arithmetic(op0, what), _arithmetic(op1, what)
    x0, x1 = opd.rows(opd.fp32(a, what)), opd.rows(opd.fp32(b, what))
    state = np.broadcast_to(opd.per_partition(initial, a.shape[0], what, "initial"), (a.shape[0], 1))[:, 0]
    with np.errstate(all="ignore"):
        out = _passthrough_scan(op_name(op0), x0, reverse0, f1, reverse1, state, x1)
        if out is None:
            # The recurrence is sequential along the free axis: step over positions, all partitions at once.
            out = np.empty_like(x0)
            for i in range(x0.shape[1]):
                step = f0(state, x0[:, i]) if reverse0 else f0(x0[:, i], state)
                state = out[:, i] = f1(x1[:, i], step) if reverse1 else f1(step, x1[:, i])
    tile = _ins.emit(out.reshape(a.shape), opd.new_dtype(dtype, promote([a.dtype, b.dtype])), dst, what)
    _ins._record_lanes(cm.VECTOR, f"{what}[{op_name(op0)},{op_name(op1)}]", a.shape, tile.dtype, 2, tile_inputs=2)
    return tile


def _passthrough_scan(op0: str, x0: np.ndarray, reverse0: bool, f1: Any, reverse1: bool, state: np.ndarray,
                      x1: np.ndarray) -> np.ndarray | None:
    """The scan in one vectorised pass when op0 passes the running value through unchanged (data0
    all ones under multiply, all zeros under add, the running sum of a cumsum): r[i] = op1(r[i-1],
    data1[i]) is a left fold, which NumPy's accumulate computes in the same order (same rounding).
    None when the scan is not of that form."""
    identity = {"multiply": 1, "add": 0}.get(op0)
    if identity is None or reverse1 or not isinstance(f1, np.ufunc) or not np.all(x0 == identity):
        return None
    return f1.accumulate(np.concatenate([state[:, None].astype(np.float32), x1], axis=1), axis=1,
                         dtype=np.float32)[:, 1:]


def _cumulative(name: str, start: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running `reg = op1(v, reg)` over each row of `values` ([P, F]) from registers `start` ([P])."""
    if name == "subtract":
        # reg_i = v_i - reg_{i-1} alternates signs: reg_i = (-1)^i (sum_{j<=i} (-1)^j v_j - reg_start).
        sign = np.where(np.arange(values.shape[1]) % 2 == 0, np.float32(1), np.float32(-1))
        return sign * (np.cumsum(sign * values, axis=1, dtype=np.float32) - start[:, None])
    ufunc = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}[name]
    return ufunc.accumulate(np.concatenate([start[:, None], values], axis=1), axis=1, dtype=np.float32)[:, 1:]


def tensor_scalar_cumulative(src: Any, op0: Any, op1: Any, imm0: Any, imm1: Any = None,
                             reduce_cmd: Any = "reset_reduce", reverse0: bool = False, dst: Any = None) -> Any:
    """VectorE, per partition: reg = op1(src[i] op0 imm0, reg), dst[i] = reg, starting from the
    accumulator registers as `reduce_cmd` leaves them (reset to op1's identity, or loaded from imm1)."""
    what = "tensor_scalar_cumulative"
    x = opd.tile(src, what, "src")
    target = _ins.destination(dst, what)
    for role, t in (("src", x), ("dst", target)):
        if t.dtype in (int32, uint32):
            raise NKIError("dtype", f"{what}: {role} cannot be {t.dtype} (an ISA limitation): use fp32, bf16, "
                           f"fp16, fp8, (u)int8 or (u)int16 tiles")
    opd.same_layout(what, x, dst=target)
    _, f0 = _arithmetic(op0, what)
    name, _ = _arithmetic(op1, what, ("add", "subtract", "multiply", "maximum", "minimum"))
    parts = x.shape[0]
    operand = opd.per_partition(imm0, parts, what, "imm0")
    values = opd.rows(opd.fp32(x, what))
    with np.errstate(all="ignore"):
        scaled = (f0(operand, values) if reverse0 else f0(values, operand)).astype(np.float32, copy=False)
    init = None if imm1 is None else opd.per_partition(imm1, parts, what, "imm1")
    registers = regs.begin(cm.VECTOR, reduce_cmd, name, parts, what, init)
    with np.errstate(all="ignore"):
        out = _cumulative(name, registers.copy(), scaled)
    registers[:] = out[:, -1]
    tile = _ins.emit(out.reshape(x.shape), float32, target, what)
    _ins._record_lanes(cm.VECTOR, f"{what}[{op_name(op0)},{name}]", x.shape, tile.dtype, 2)
    return tile
