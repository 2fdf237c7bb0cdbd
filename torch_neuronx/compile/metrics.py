"""Counters and per-stage compile times of the ``neuron`` backend
(``torch_neuronx.get_dynamo_metrics()``)."""
from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from typing import Any

_COUNTERS = ("graphs", "graph_cache_hits", "executables_compiled", "cache_hits", "cache_misses",
             "recompilations", "eager_fallbacks")
_counts: collections.Counter[str] = collections.Counter()
_stage_seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
_graph_breaks_at_reset = 0


def _dynamo_graph_breaks() -> int:
    # Dynamo counts graph breaks per reason, for every backend: it does not attribute them.
    from torch._dynamo.utils import counters
    return sum(counters["graph_break"].values())


def count(name: str) -> None:
    _counts[name] += 1


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the time spent in the block to the stage's compile time."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _stage_seconds[name] += time.perf_counter() - start


def get_dynamo_metrics() -> dict[str, Any]:
    """Since the last reset: Dynamo graphs received by the ``neuron`` backend, graphs whose
    AOTAutograd result came from the cache (no tracing), executables compiled, executable cache
    hits and misses, recompilations (an executable compiled for a graph
    already compiled for other input specs), graphs run eagerly after a failed compile, graph
    breaks (counted by Dynamo over all backends) and seconds per compile stage. Stages nest:
    ``aot_autograd`` includes ``lowering``, ``compiler`` and ``cache_load``."""
    return {**{name: _counts[name] for name in _COUNTERS},
            "graph_breaks": _dynamo_graph_breaks() - _graph_breaks_at_reset,
            "compile_time_s": dict(_stage_seconds)}


def reset_dynamo_metrics() -> None:
    global _graph_breaks_at_reset
    _counts.clear()
    _stage_seconds.clear()
    _graph_breaks_at_reset = _dynamo_graph_breaks()
