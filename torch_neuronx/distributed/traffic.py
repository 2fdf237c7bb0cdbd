"""What a collective moves over the links, as nccl-tests counts it.

The bus factor turns a collective's size into the bytes each rank's link carries in a ring (so
bus bandwidth compares across collectives and group sizes); the ring steps are the link
latencies it pays. Used by the profiler's collective message (:func:`collective_message`, read
by ``torch_neuronx.profiling``'s cost model) and by ``benchmarks/collectives.py``.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

import torch


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


def collective_message(name: str, group_size: int, tensors: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                       linked: bool) -> str:
    """The collective's message for the profiler (torch_neuronx/profiling): its size as
    nccl-tests counts it (the larger of what a rank passes in and gets out), the bus factor
    and ring steps of its algorithm, and the transport; empty for a point-to-point wait."""
    base = name.split(" (")[0]
    if name.endswith(")") and not name.endswith("post"):
        return ""  # the wait for a posted send or receive moves nothing
    bus, steps = traffic(base, group_size)
    out_ids = {id(t) for t in outputs}
    written = sum(t.nbytes for t in outputs)
    read = sum(t.nbytes for t in tensors if id(t) not in out_ids) or written
    return json.dumps({"collective": base, "group_size": group_size, "bytes": max(read, written),
                       "dtype": str(tensors[0].dtype).removeprefix("torch.") if tensors else None,
                       "bus_factor": bus, "ring_steps": steps,
                       "transport": "shared_memory" if linked else "gloo"})
