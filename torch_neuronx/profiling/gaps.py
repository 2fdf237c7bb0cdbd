"""What each idle gap of a simulated core waited for, and the dependency edges behind it.

A profile's events become Explorer's ``SystemProfileEvents`` rows (framework operators, runtime
calls, device kernels and copies) and ``Flow`` edges between them:

- ``data``: the kernel that last wrote a tensor's storage to a kernel that reads it (any core);
- ``launch``: a runtime launch call to the device kernel or copy it enqueued (``gap_time``: from
  the call's end to the kernel's start: the queue's hand-off);
- ``stream order``: a core's kernel to its next one (``gap_time``: the core's idle time between
  them), with ``waited_for``, what the core waited for in that gap:
  - ``host sync``: the host was blocked reading a result (``.item()``, a copy to the host, a
    synchronize) when the core went idle, and launched the next kernel only after;
  - ``cpu fallback``: the host was computing an operator that fell back to the CPU for most of
    the gap (fallbacks are host work: they are not in the core's kernel sequence);
  - ``host launch``: the next kernel was launched after the core went idle (the host, running
    Python, was slower than the device);
  - ``collective``: the next kernel is a collective (it starts when its peers are ready);
  - ``queue``: the next kernel was already queued: the gap is the runtime's own hand-off.

All of it is measured on the simulator (the gaps are this machine's, not the chip's).
"""
from __future__ import annotations

import bisect
import itertools
import socket
from collections import defaultdict
from typing import Any

from torch.autograd import DeviceType

from .cost_model import described_tensors
from .explorer_schema import IDLE_CAUSES

RUNTIME_ACTIVITY = "privateuse1_runtime"  # the profiler activity of the runtime's host calls
FALLBACK_PREFIX = "cpu fallback: "  # the device kernel of an operator run on the host
COLLECTIVE_PREFIX = "c10d::"  # the neuron process group's kernels (torch_neuronx/distributed)
# Host calls that block until the device has produced a value.
SYNCS = ("aten::item", "aten::_local_scalar_dense", "aten::_to_cpu", "neuronDeviceSynchronize",
         "neuronStreamSynchronize", "neuronEventSynchronize")
HOST_SYNC, CPU_FALLBACK, HOST_LAUNCH, COLLECTIVE, QUEUE = IDLE_CAUSES


def _source(e: Any) -> str:
    if e.device_type() != DeviceType.CPU:
        return "neuron_hw"
    return "neuron_rt" if e.activity_type() == RUNTIME_ACTIVITY else "framework"


def _thread(tid: int) -> int:
    """A thread id as int64 (a profiler step marker's is the unsigned -1: no thread)."""
    return tid if tid < 1 << 63 else -1


def in_order(events: list) -> list:
    """A profile's events in time order: the order of their SystemProfileEvents rows."""
    return sorted(events, key=lambda e: (e.start_ns(), e.end_ns()))


def system_events(events: list) -> list[dict]:
    """Explorer's SystemProfileEvents rows of a profile's events, in time order (``id``: the row)."""
    host = socket.gethostname()
    rows = []
    for e in in_order(events):
        device = e.device_type() != DeviceType.CPU
        rows.append({"id": len(rows), "name": e.name(), "start_ts": e.start_ns(), "end_ts": e.end_ns(),
                     "duration_ns": e.end_ns() - e.start_ns(), "trace_event_source": _source(e),
                     "instance_id": host, "process_id": 0 if device else e.device_index(),
                     "thread_id": 0 if device else _thread(e.start_thread_id()),
                     "nc_idx": e.device_index() if device else None,
                     "correlation_id": e.linked_correlation_id() if device or _source(e) == "neuron_rt"
                     else e.correlation_id()})
    return rows


class Spans:
    """Host intervals (syncs or fallbacks) sorted by start, queried in logarithmic time: the
    exporter asks about every gap of every core (a 1,000-step profile has tens of thousands)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = sorted(rows, key=lambda r: r["start_ts"])
        self.starts = [r["start_ts"] for r in self.rows]
        self.reach = list(itertools.accumulate((r["end_ts"] for r in self.rows), max))  # latest end so far

    def cover(self, t: int) -> bool:
        """Whether one of the intervals holds ``t``."""
        i = bisect.bisect_right(self.starts, t)
        return i > 0 and self.reach[i - 1] >= t

    def overlapping(self, start: int, end: int) -> list[dict]:
        """The intervals that overlap [start, end] (a point when equal), latest start first."""
        out = []
        for i in range(bisect.bisect_right(self.starts, end) - 1, -1, -1):
            if self.reach[i] < start:
                break
            if self.rows[i]["end_ts"] >= start:
                out.append(self.rows[i])
        return out

    def overlap(self, start: int, end: int) -> int:
        """Nanoseconds of [start, end) the intervals cover (summed: host work does not overlap)."""
        return sum(max(0, min(r["end_ts"], end) - max(r["start_ts"], start)) for r in self.overlapping(start, end))


def _waited_for(previous: dict, kernel: dict, launch: dict | None, syncs: Spans, fallbacks: Spans) -> str:
    """What the core waited for between ``previous`` ending and ``kernel`` starting."""
    start, end = previous["end_ts"], kernel["start_ts"]
    if kernel["name"].startswith(COLLECTIVE_PREFIX):
        return COLLECTIVE
    if syncs.cover(start) and (launch is None or launch["start_ts"] >= start):
        return HOST_SYNC
    if end > start and fallbacks.overlap(start, end) * 2 >= end - start:
        return CPU_FALLBACK
    if launch is None or launch["start_ts"] < start:
        return QUEUE
    return HOST_LAUNCH


def _storages(values: list) -> list[int]:
    """The storage addresses of the described tensors among ``values`` (an input or output list)."""
    return [t["storage"] for t in described_tensors(values) if "storage" in t]


def data_edges(rows: list[dict], args: dict[int, dict]) -> list[dict]:
    """``data`` edges: each kernel from the kernel that last wrote a storage it reads (a RAW
    dependency through a tensor, on any core), by the kernels' described arguments (``args``: row
    id -> the kernel's inputs and outputs)."""
    writer: dict[int, dict] = {}
    edges = []
    for r in rows:  # in time order
        call = args.get(r["id"])
        if r["trace_event_source"] != "neuron_hw" or call is None:
            continue
        producers = {writer[s]["id"]: writer[s] for s in _storages(call.get("inputs", [])) if s in writer}
        edges += [_edge(p, r, "data", None) for p in producers.values() if p["id"] != r["id"]]
        for s in _storages(call.get("outputs", [])):
            writer[s] = r
    return edges


def flows(rows: list[dict], args: dict[int, dict] | None = None) -> list[dict]:
    """The launch, stream-order and data edges between ``rows`` (:func:`system_events`)."""
    launches = {r["correlation_id"]: r for r in rows
                if r["trace_event_source"] == "neuron_rt" and r["name"].startswith("neuronLaunch")}
    syncs = Spans([r for r in rows if r["trace_event_source"] != "neuron_hw" and r["name"] in SYNCS])
    fallbacks = Spans([r for r in rows
                        if r["trace_event_source"] == "neuron_hw" and r["name"].startswith(FALLBACK_PREFIX)])
    cores: dict[int, list[dict]] = defaultdict(list)
    edges = []
    for r in rows:
        if r["trace_event_source"] != "neuron_hw" or r["name"].startswith(FALLBACK_PREFIX):
            continue
        launch = launches.get(r["correlation_id"])
        if launch is not None:
            edges.append(_edge(launch, r, "launch", None))
        cores[r["nc_idx"]].append(r)
    for kernels in cores.values():
        for previous, kernel in zip(kernels, kernels[1:]):
            cause = _waited_for(previous, kernel, launches.get(kernel["correlation_id"]), syncs, fallbacks)
            edges.append(_edge(previous, kernel, "stream order", cause))
    return edges + data_edges(rows, args or {})


def _edge(before: dict, after: dict, kind: str, waited_for: str | None) -> dict:
    return {"in_id": before["id"], "out_id": after["id"], "in_table": "SystemProfileEvents",
            "out_table": "SystemProfileEvents", "dependency_type": kind,
            "gap_time": max(0, after["start_ts"] - before["end_ts"]), "waited_for": waited_for}


def idle_by_cause(edges: list[dict]) -> dict[str, int]:
    """Nanoseconds of core idle time by what it waited for."""
    total: dict[str, int] = defaultdict(int)
    for e in edges:
        if e["dependency_type"] == "stream order":
            total[e["waited_for"]] += e["gap_time"]
    return dict(total)
