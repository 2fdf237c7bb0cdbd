"""The kernel-language error type and the lookup of the kernel line that caused it."""
from __future__ import annotations

import functools
import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# Validation kernels live inside the package but are user-level kernel code: errors point at them.
_KERNELS_DIR = os.path.join(_PKG_DIR, "kernels") + os.sep


@functools.lru_cache(maxsize=None)
def _is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_PKG_DIR) and not path.startswith(_KERNELS_DIR)


def source_location(skip: int = 1) -> str:
    """`file:line` of the innermost stack frame outside the nki implementation (the kernel line)."""
    frame = sys._getframe(skip)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>:0"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class NKIError(RuntimeError):
    """A kernel broke a hardware or language rule.

    `rule` names the rule (e.g. ``partition-dim``), `location` is the ``file:line`` of the kernel
    statement that issued the offending instruction.
    """

    def __init__(self, rule: str, message: str, location: str | None = None) -> None:
        self.rule = rule
        self.location = location if location is not None else source_location(2)
        self.detail = message
        super().__init__(f"[rule {rule}] {message} (kernel line {self.location})")
