"""What a collective moves over the links, as nccl-tests counts it.

The bus factor turns a collective's size into the bytes each rank's link carries in a ring (so
bus bandwidth compares across collectives and group sizes); the ring steps are the link
latencies it pays. Used by the profiler's collective message (:mod:`.process_group`, then
``torch_neuronx.profiling``'s cost model) and by ``benchmarks/collectives.py``.
"""
from __future__ import annotations

from typing import NamedTuple


class Traffic(NamedTuple):
    bus_factor: float  # bytes through each rank's link per byte of the collective's size
    ring_steps: int


def traffic(collective: str, ranks: int) -> Traffic:
    """``collective`` (a ``torch.distributed`` function name) in a ring of ``ranks``; a
    point-to-point transfer (or any other name) moves its bytes once, in one step."""
    n = ranks
    if collective == "all_reduce":  # a reduce-scatter, then an all-gather
        return Traffic(2 * (n - 1) / n, 2 * (n - 1))
    if collective in ("broadcast", "reduce"):
        return Traffic(1.0, n - 1)
    if collective in _ONE_PASS:
        return Traffic((n - 1) / n, n - 1)
    return Traffic(1.0, 1)


# Each rank's link carries (n - 1) / n of the collective's size.
_ONE_PASS = ("all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
             "all_to_all_single", "all_to_all", "gather", "scatter")
