"""Which operators ran as device kernels and which fell back to the CPU."""
from __future__ import annotations

from .. import _C


def get_executed_ops() -> dict[str, int]:
    """Operators that ran as device kernels since start (or the last clear), with launch counts."""
    return dict(_C._executed_ops())


def get_fallback_ops() -> dict[str, int]:
    """Operators that fell back to the CPU since start (or the last clear), with call counts."""
    return dict(_C._fallback_ops())


def clear_op_tracking() -> None:
    """Reset both records (fallback warnings are issued again afterwards)."""
    _C._clear_op_tracking()
