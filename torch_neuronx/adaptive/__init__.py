"""Adaptive eager: plain eager code, with the operator sequences a core keeps receiving compiled
into single kernels (docs/adaptive-eager.md).

``torch_neuronx.set_eager_mode("adaptive")`` (or ``TORCH_NEURONX_EAGER_MODE=adaptive``) turns it
on, ``"eager"`` off; ``with torch_neuronx.eager_mode("adaptive"):`` does it for a block. The device
(``csrc/shim/adaptive/``) groups the planned calls a core receives back to back into segments
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
PLACEMENTS = ("auto", "worker", "program")
PLACEMENT_ENV = "TORCH_NEURONX_ADAPTIVE_PLACEMENT"


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


def set_fused_placement(placement: str) -> None:
    """Where fused kernels run: ``"auto"`` (the default) times the program's loop both ways and
    keeps the faster, ``"worker"`` queues them behind the core's other kernels (the program
    thread goes on dispatching), ``"program"`` runs them on the program thread once the queue is
    empty (nothing competes for the cores). See docs/adaptive-eager.md."""
    if placement not in PLACEMENTS:
        raise ValueError(f"torch_neuronx.adaptive.set_fused_placement: placement must be one of {PLACEMENTS}, "
                         f"got {placement!r}")
    _C._adaptive_set_placement(placement)


def get_fused_placement() -> str:
    """The setting of :func:`set_fused_placement`."""
    return _C._adaptive_placement()


def get_adaptive_metrics() -> dict[str, Any]:
    """Counters since the last reset: segments seen (ended and counted without a fused kernel),
    segments compiled, compile failures (such segments run their operators one by one for
    good), fused launches and the operator calls they replaced, calls held back that then ran
    one by one (the segment changed), fused launches refused for a memory hazard, and compile
    seconds; and per core, where its fused kernels run (``fused_placement``: the state — "finding
    the loop", "timing", "worker" or "program thread" —, the fused launches per iteration of the
    loop found, and the program thread's time over the worker's in the last timing)."""
    from . import segments
    return {**_C._adaptive_counters(), **segments.metrics(), "fused_placement": _C._adaptive_placements()}


def reset_adaptive() -> None:
    """Forget every observed and compiled segment and the counters (what a core holds is
    launched first; compile requests not started yet are dropped)."""
    from . import segments
    segments.drop_queued()
    segments.wait_for_compiles()
    _C._adaptive_reset()
    segments.reset_metrics()


def _from_environment(variable: str, allowed: tuple[str, ...]) -> str:
    """The value of ``variable`` in lower case ("" when unset), refused unless one of ``allowed``."""
    value = os.environ.get(variable, "").strip().lower()
    if value and value not in allowed:
        raise ValueError(f"{variable}={value!r}: expected one of {allowed}")
    return value


def configure_from_environment() -> None:
    """Apply ``TORCH_NEURONX_EAGER_MODE`` and ``TORCH_NEURONX_ADAPTIVE_PLACEMENT`` (at import)."""
    if placement := _from_environment(PLACEMENT_ENV, PLACEMENTS):
        set_fused_placement(placement)
    if mode := _from_environment(ENV, MODES):
        set_eager_mode(mode)
