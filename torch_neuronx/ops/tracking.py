"""Which operators ran on the device and which fell back to the CPU, by the names users call.

Every operator called with neuron tensors whose work reached the device is recorded, composite
ones included (``aten::linear`` as well as the ``aten::addmm`` it runs, ``aten::_to_copy`` as well
as ``aten::_copy_from``): as executed when everything it decomposed into ran on the device, as a
fallback when any part ran on the CPU. Counts are calls. Operators that only make views or
allocate (``aten::view``, ``aten::empty``) run no kernel and are not recorded.
"""
from __future__ import annotations

from .. import _C


def get_executed_ops() -> dict[str, int]:
    """Operators that ran on the device since start (or the last clear), with call counts."""
    return dict(_C._executed_ops())


def get_fallback_ops() -> dict[str, int]:
    """Operators that ran on the CPU, wholly or in part, since start (or the last clear), with
    call counts: the operator whose kernel fell back and every operator around it."""
    return dict(_C._fallback_ops())


def get_fallback_kernels() -> dict[str, int]:
    """The operators of :func:`get_fallback_ops` whose own kernel fell back (no composites)."""
    return dict(_C._fallback_ops(kernels_only=True))


def clear_op_tracking() -> None:
    """Reset both records (fallback warnings are issued again afterwards)."""
    _C._clear_op_tracking()
