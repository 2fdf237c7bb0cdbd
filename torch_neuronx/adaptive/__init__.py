"""Adaptive eager: plain eager code, with the operator sequences a core keeps receiving compiled
into single kernels (docs/adaptive-eager.md).

``torch_neuronx.set_eager_mode("adaptive")`` (or ``TORCH_NEURONX_EAGER_MODE=adaptive``) turns it
on, ``"eager"`` off; ``with torch_neuronx.eager_mode("adaptive"):`` does it for a block. The device
(``csrc/shim/adaptive.cpp``) groups the planned calls a core receives back to back into segments
and counts them; a segment seen often enough is described to :mod:`.segments`, which compiles it
in the background (in a compile process) with the compile pipeline's compiler, and the device
launches it as one kernel when the same segment comes again.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from .. import _C

MODES = ("eager", "adaptive")
ENV = "TORCH_NEURONX_EAGER_MODE"


def get_eager_mode() -> str:
    """``"adaptive"`` or ``"eager"``."""
    return "adaptive" if _C._adaptive_enabled() else "eager"


def set_eager_mode(mode: str) -> None:
    """Run eager operators one by one (``"eager"``, the default) or learn and fuse the operator
    sequences the program repeats (``"adaptive"``). Switching launches whatever a core holds."""
    if mode not in MODES:
        raise ValueError(f"torch_neuronx.set_eager_mode: mode must be one of {MODES}, got {mode!r}")
    if mode == "adaptive":
        from . import segments  # imports the compile pipeline: only when asked for
        segments.start()
    _C._adaptive_set_enabled(mode == "adaptive")


@contextlib.contextmanager
def eager_mode(mode: str) -> Iterator[None]:
    """``set_eager_mode(mode)`` for the block, then the mode before it."""
    before = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(before)


def get_adaptive_metrics() -> dict[str, Any]:
    """Counters since the last reset: segments seen (ended and counted without a fused kernel),
    segments compiled, compile failures (such segments run their operators one by one for
    good), fused launches and the operator calls they replaced, calls held back that then ran
    one by one (the segment changed), fused launches refused for a memory hazard, and compile
    seconds."""
    from . import segments
    return {**_C._adaptive_counters(), **segments.metrics()}


def reset_adaptive() -> None:
    """Forget every observed and compiled segment and the counters (what a core holds is
    launched first; compile requests not started yet are dropped)."""
    from . import segments
    segments.drop_queued()
    segments.wait_for_compiles()
    _C._adaptive_reset()
    segments.reset_metrics()


def configure_from_environment() -> None:
    """Apply ``TORCH_NEURONX_EAGER_MODE`` (at import)."""
    mode = os.environ.get(ENV, "").strip().lower()
    if mode:
        if mode not in MODES:
            raise ValueError(f"{ENV}={mode!r}: expected one of {MODES}")
        set_eager_mode(mode)
