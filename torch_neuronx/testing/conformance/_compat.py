"""Import PyTorch's OpInfo database without the test-only packages it imports at module level.

``torch.testing._internal.common_utils`` imports ``expecttest`` (a PyTorch development
dependency, not a dependency of the wheel). The conformance runner uses only the OpInfo data and
sample generators, never ``expecttest``'s assertions, so a minimal stand-in is installed when the
real package is missing.
"""
from __future__ import annotations

import sys
import types
import unittest


def ensure_expecttest() -> None:
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")

        class TestCase(unittest.TestCase):  # the only name common_utils uses
            pass

        stub.TestCase = TestCase
        stub.__torch_neuronx_stub__ = True
        sys.modules["expecttest"] = stub


_OP_DB = None


def op_db():
    """PyTorch's OpInfo list (``common_methods_invocations.op_db``), imported once (~10 s)."""
    global _OP_DB
    if _OP_DB is None:
        ensure_expecttest()
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
