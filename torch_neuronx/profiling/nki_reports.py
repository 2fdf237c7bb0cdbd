"""The simulator reports of kernel-language kernels, for the Instruction/OpcodeSummary tables."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nki.simulator import RunReport

_lock = threading.Lock()
_latest: dict[str, RunReport] = {}


def note(kernel: str, report: RunReport) -> None:
    """Keep the latest report of each kernel (one per name bounds the memory kept)."""
    with _lock:
        _latest[kernel] = report


def latest(kernel: str) -> RunReport | None:
    with _lock:
        return _latest.get(kernel)
