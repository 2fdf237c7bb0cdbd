"""`nki.lnc`: communication between the two physical NeuronCores of a logical NeuronCore (the
current reference's module; the `nki.isa` spellings of these instructions are deprecated wrappers).

The two cores are the two programs of a ``kernel[2]`` launch (ranks 0 and 1, see "SPMD launches
and logical cores" in docs/nki.md). The n-th call of an instruction on one core pairs with the n-th
call on the other. ``priority`` (DMA quality of service on NeuronCore-v4) and ``name`` have no
effect on simulated results; ``priority`` is checked as published.
"""
from __future__ import annotations

from typing import Any

from .errors import NKIError as _NKIError
from .isa import _engine as _engine_name, dma_engine as _dma_engine, engine as _engine
from .simulator import cross_core as _cross_core
from .simulator.cost_model import GPSIMD as _GPSIMD


def _check_priority(what: str, priority: Any, engine_used: Any = _dma_engine.dma) -> None:
    if priority is None:
        return
    if engine_used == _dma_engine.gpsimd_dma:
        raise _NKIError("sendrecv-priority", f"{what}: priority must be None with dma_engine.gpsimd_dma, got "
                        f"{priority!r}")
    if not isinstance(priority, int) or not 0 <= priority <= 3:
        raise _NKIError("sendrecv-priority", f"{what}: priority must be None or 0 (highest) to 3 (lowest), got "
                        f"{priority!r}")


def core_barrier(data: Any, cores: Any, engine: Any = _engine.gpsimd, name: str | None = None) -> None:
    """Wait until both cores of `cores` (only ``(0, 1)``) reach this barrier, so that their writes to
    the shared HBM tensor `data` are done before either reads it."""
    _cross_core.core_barrier(data, cores, _engine_name(engine, _GPSIMD), "nki.lnc.core_barrier")


def sendrecv(src: Any, dst: Any, send_to_rank: int, recv_from_rank: int, dma_engine: Any = _dma_engine.dma,
             name: str | None = None, priority: int | None = None) -> None:
    """Send the SBUF tile `src` to the `dst` of core `send_to_rank` and receive the `src` of core
    `recv_from_rank` into this core's `dst` (same dtype, partitions and elements per partition)."""
    _check_priority("nki.lnc.sendrecv", priority, dma_engine)
    _cross_core.sendrecv(src, dst, send_to_rank, recv_from_rank, "nki.lnc.sendrecv")


def sendrecv_compute(src: Any, dst: Any, send_to_rank: int, recv_from_rank: int, reduce_op: Any,
                     name: str | None = None, priority: int | None = None) -> None:
    """As `sendrecv`, and write ``reduce_op(src, received)`` into `dst` (``nl.add``, ``nl.maximum``
    or ``nl.minimum``, computed in fp32 and rounded to dst's dtype): src and dst are both SBUF tiles
    or both HBM tensors private to the core."""
    what = "nki.lnc.sendrecv_compute"
    _check_priority(what, priority)
    reduce = _cross_core.reduce_op(reduce_op, what)
    _cross_core.sendrecv(src, dst, send_to_rank, recv_from_rank, what, reduce)
