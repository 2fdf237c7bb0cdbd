"""Scalar registers of the engine sequencers (nki.isa.VirtualRegister): 32-bit integers used for
dynamic loop bounds, while-loop conditions and runtime offsets. The simulator runs eagerly, so a
register is a slot of the run context holding its current value, read whenever Python needs it
(`range(reg)`, `while reg:`, `nl.ds(reg, n)`, `t.ap(..., scalar_offset=reg)`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import PACKED_X4, is_float
from ..errors import NKIError
from . import instructions as _ins
from .context import RunContext, current
from .tile import AccessPattern

INT32_MIN, UINT32_MAX = -(2 ** 31), 2 ** 32 - 1   # a register holds 32 bits, signed or unsigned


def _checked(value: Any, what: str) -> int:
    if isinstance(value, VirtualRegister):
        return value.value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise NKIError("register-value", f"{what}: a register takes an integer or another register, got {value!r}")
    if not INT32_MIN <= int(value) <= UINT32_MAX:
        raise NKIError("register-range", f"{what}: {value} does not fit a 32-bit register")
    return int(value)


class VirtualRegister:
    """A register of an engine sequencer, allocated with nisa.register_alloc and set with
    register_move / register_load; valid in the kernel run that allocated it."""

    def __init__(self, state: Any = None, frozen: bool = False) -> None:
        self._ctx: RunContext = current()
        self._slot = len(self._ctx.scalar_registers)
        self._ctx.scalar_registers.append(None if state is None else _checked(state, "register_alloc"))
        self.frozen = frozen

    @property
    def value(self) -> int:
        """The register's current value (an uninitialized register cannot be read)."""
        if current() is not self._ctx:
            raise NKIError("register-scope", "a VirtualRegister is valid only in the kernel run that allocated it")
        value = self._ctx.scalar_registers[self._slot]
        if value is None:
            raise NKIError("register-uninitialized", "register read before it holds a value: initialize it with "
                           "register_alloc(x), register_move or register_load")
        return value

    def set(self, value: int) -> None:
        if self.frozen:
            raise NKIError("register-frozen", "this register is read-only (frozen)")
        self._ctx.scalar_registers[self._slot] = value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __bool__(self) -> bool:
        return self.value != 0

    def __add__(self, other: Any) -> int:
        return self.value + int(other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> int:
        return self.value - int(other)

    def __rsub__(self, other: Any) -> int:
        return int(other) - self.value

    def __mul__(self, other: Any) -> int:
        return self.value * int(other)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        value = self._ctx.scalar_registers[self._slot]
        return f"VirtualRegister(r{self._slot}={'uninitialized' if value is None else value})"


def _register(x: Any, what: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise NKIError("register-operand", f"{what} must be a VirtualRegister (nisa.register_alloc()), "
                       f"got {type(x).__name__}")
    return x


def _scalar_tensor(x: Any, what: str) -> tuple[Any, np.dtype]:
    """The one-element HBM tensor (slice) or on-chip tile a register is loaded from / stored to."""
    target = _ins._pattern(x, what)
    shape = target.resolve().shape if isinstance(target, AccessPattern) else target.shape
    if int(np.prod(shape)) != 1:
        raise NKIError("register-tensor", f"{what} must hold exactly one element (shape [1] or [1, 1]), "
                       f"got shape {tuple(shape)}")
    if target.dtype in PACKED_X4:
        raise NKIError("register-tensor", f"{what}: packed MX x4 dtypes hold four values, not a scalar")
    return target, target.dtype


def register_alloc(x: Any = None) -> VirtualRegister:
    """A new register, uninitialized or holding the integer `x`."""
    return VirtualRegister(x)


def register_move(dst: Any, src: Any) -> None:
    """dst = src (an integer constant or another register)."""
    _register(dst, "register_move dst").set(_checked(src, "register_move"))


def register_load(dst: Any, src: Any) -> None:
    """dst = the single value of `src` (HBM or SBUF); float values round to the nearest integer."""
    register = _register(dst, "register_load dst")
    source, dtype = _scalar_tensor(src, "register_load src")
    raw = (source.read() if isinstance(source, AccessPattern) else source.data).reshape(-1)[0]
    if is_float(dtype):
        if not np.isfinite(float(raw)):
            raise NKIError("register-range", f"register_load: {float(raw)} is not a finite value")
        raw = np.rint(float(raw))
    register.set(_checked(int(raw), "register_load"))
    _ins._record_dma("register_load", (1,), dtype, dtype.itemsize)


def register_store(dst: Any, src: Any) -> None:
    """The one-element `dst` (HBM or SBUF) = the value of register `src`, converted to dst's dtype."""
    value = _register(src, "register_store src").value
    target, dtype = _scalar_tensor(dst, "register_store dst")
    values = np.full((1,), value, np.int64)
    if isinstance(target, AccessPattern):
        target.write(_ins._round(values, dtype))
    else:
        _ins.emit(values, dtype, target, "register_store")
    _ins._record_dma("register_store", (1,), dtype, dtype.itemsize)
