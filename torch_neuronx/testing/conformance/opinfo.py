"""PyTorch's OpInfo database (``torch.testing._internal``, shipped with the wheel).

Importing it needs ``expecttest``, a dependency of this package for that reason.
"""
from __future__ import annotations

_OP_DB = None


def op_db():
    """PyTorch's OpInfo list (``common_methods_invocations.op_db``), imported once (~10 s)."""
    global _OP_DB
    if _OP_DB is None:
        from torch.testing._internal.common_methods_invocations import op_db as db
        _OP_DB = db
    return _OP_DB


def op_key(op) -> str:
    """``name`` or ``name.variant`` (the OpInfo test id without device and dtype)."""
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def find_ops(keys=None):
    """OpInfos whose key (or plain name, selecting all its variants) is in ``keys``; all if None."""
    ops = op_db()
    if keys is None:
        return list(ops)
    wanted = set(keys)
    found = [op for op in ops if op_key(op) in wanted or op.name in wanted]
    known = {op_key(op) for op in ops} | {op.name for op in ops}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"unknown OpInfo operator(s): {', '.join(missing)}")
    return found
