"""The critical path of a profile and what-ifs, replayed on its dependency graph.

The graph: the host runs a chain of calls (the operators that launched kernels, the host syncs,
the CPU fallbacks), separated by the measured Python time between them; each kernel is ready
when its launching call reaches the point it launched it, and starts when its core is free and
the kernels that wrote the tensors it reads (Flow's ``data`` edges, any core) have finished; a
host sync ends when every kernel launched before it has finished (plus its own measured tail).
Replaying the graph with the measured durations gives the step as measured (the queue's own
hand-off is the only thing left out); replaying it with changed durations answers a what-if:

- ``generation``: every kernel takes its estimated time on that chip (EstimatedActivity);
- ``engine`` (with ``speedup``): the share of each kernel's estimated time on that engine runs
  ``speedup`` times faster;
- ``remove_fallbacks``: the CPU fallbacks take no time (as if the operators ran on the device).

The critical path is the chain of binding predecessors from the last event back to the first.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..profiling.gaps import FALLBACK_PREFIX, SYNCS

if TYPE_CHECKING:
    from .profile_data import ProfileData


@dataclass
class _Host:
    id: int
    start: int
    end: int
    kind: str                 # "launch", "sync" or "fallback"
    fallback_ns: int = 0      # of the fallbacks it contains


@dataclass
class WhatIf:
    generation: str | None = None
    engine: str | None = None
    speedup: float = 2.0
    remove_fallbacks: bool = False


def _host_chain(data: ProfileData) -> tuple[list[_Host], dict[int, int]]:
    """The host's outermost calls in time order, and each kernel's launching call (index)."""
    ev = data.events
    src, names, corr = ev["trace_event_source"], ev["name"], ev["correlation_id"]
    launcher: dict[int, int] = {}  # correlation id -> innermost framework op (row)
    kernels_of: dict[int, list[int]] = defaultdict(list)
    candidates = []
    for n in range(len(names)):
        if src[n] == "neuron_hw" and not names[n].startswith(FALLBACK_PREFIX):
            kernels_of[corr[n]].append(n)
    for n in range(len(names)):
        if src[n] == "framework" and corr[n] in kernels_of:
            if corr[n] not in launcher or ev["start_ts"][n] >= ev["start_ts"][launcher[corr[n]]]:
                launcher[corr[n]] = n
    for n in range(len(names)):
        if src[n] == "neuron_hw" and names[n].startswith(FALLBACK_PREFIX):
            candidates.append((n, "fallback"))
        elif src[n] == "framework" and names[n] in SYNCS:
            candidates.append((n, "sync"))
    candidates += [(n, "launch") for n in launcher.values()]
    candidates.sort(key=lambda c: (ev["start_ts"][c[0]], -ev["end_ts"][c[0]]))
    chain: list[_Host] = []
    owner: dict[int, int] = {}  # row -> chain index
    for n, kind in candidates:
        s, e = ev["start_ts"][n], ev["end_ts"][n]
        if chain and e <= chain[-1].end:  # inside the previous outermost call
            host = chain[-1]
            host.fallback_ns += (e - s) if kind == "fallback" else 0
            host.kind = "sync" if kind == "sync" else host.kind
        else:
            chain.append(_Host(n, s, e, kind, (e - s) if kind == "fallback" else 0))
        owner[n] = len(chain) - 1
    kernel_launch = {k: owner[launcher[c]] for c, ks in kernels_of.items() if c in launcher for k in ks}
    return chain, kernel_launch


def _durations(data: ProfileData, what: WhatIf) -> dict[int, int]:
    """Each kernel's duration (row -> ns) under ``what``."""
    ev = data.events
    out = {n: ev["duration_ns"][n] for n, s in enumerate(ev["trace_event_source"]) if s == "neuron_hw"}
    if what.generation is None and what.engine is None:
        return out
    generation = what.generation or data.meta.get("target_generation")
    spans: dict[int, list[int]] = {}
    engine_ns: dict[int, int] = defaultdict(int)
    total_ns: dict[int, int] = defaultdict(int)
    for r in data.estimated:
        if r["generation"] != generation:
            continue
        span = spans.setdefault(r["event_id"], [r["start_ts"], r["end_ts"]])
        span[0], span[1] = min(span[0], r["start_ts"]), max(span[1], r["end_ts"])
        total_ns[r["event_id"]] += r["duration_ns"]
        if r["engine"] == what.engine:
            engine_ns[r["event_id"]] += r["duration_ns"]
    for event_id, (start, end) in spans.items():
        n = data._by_id[event_id]
        base = (end - start) if what.generation else out[n]
        if what.engine and total_ns[event_id]:
            share = engine_ns[event_id] / total_ns[event_id]
            base = round(base * (1 - share + share / what.speedup))
        out[n] = base
    return out


def replay(data: ProfileData, what: WhatIf | None = None) -> dict:
    """The profile replayed under ``what`` (default: as measured): its span, the critical path and
    its time by kind."""
    what = what or WhatIf()
    ev = data.events
    chain, kernel_launch = _host_chain(data)
    durations = _durations(data, what)
    kernels = sorted((n for n in durations if not ev["name"][n].startswith(FALLBACK_PREFIX)),
                     key=lambda n: ev["start_ts"][n])
    producers: dict[int, list[int]] = defaultdict(list)  # kernel row -> the rows it reads from
    for f in data.flows:  # SystemProfileEvents edges only (ProfileData keeps Instruction edges apart)
        if f["dependency_type"] == "data":
            producers[data._by_id[f["out_id"]]].append(data._by_id[f["in_id"]])
    by_launch: dict[int, list[int]] = defaultdict(list)
    for k in kernels:
        if k in kernel_launch:
            by_launch[kernel_launch[k]].append(k)
    start: dict[tuple, int] = {}
    end: dict[tuple, int] = {}
    binding: dict[tuple, tuple | None] = {}
    core_last: dict[int, tuple] = {}
    latest: tuple | None = None  # the replayed kernel that ends last so far
    latest_measured = 0           # the latest measured end of those kernels
    for i, h in enumerate(chain):
        node = ("host", i)
        previous = ("host", i - 1) if i else None
        gap = h.start - chain[i - 1].end if i else 0
        start[node] = (end[previous] + gap) if previous else h.start
        binding[node] = previous
        own = h.end - h.start - (h.fallback_ns if what.remove_fallbacks else 0)
        if h.kind == "fallback" and what.remove_fallbacks:
            own = 0
        end[node] = start[node] + own
        if h.kind == "sync" and latest is not None:
            # Measured: the sync's tail after the last kernel it waited for finished.
            tail = max(0, h.end - max(h.start, latest_measured))
            if end[latest] + tail > end[node]:
                end[node], binding[node] = end[latest] + tail, latest
        for k in by_launch.get(i, []):
            kn = ("kernel", k)
            offset = max(0, min(ev["start_ts"][k], h.end) - h.start)
            start[kn], binding[kn] = start[node] + min(offset, own), node
            # It waits for its core and for the kernels that wrote what it reads (any core).
            waits = [core_last.get(ev["nc_idx"][k])] + [("kernel", p) for p in producers.get(k, ())]
            for before in waits:
                if before is not None and before in end and end[before] > start[kn]:
                    start[kn], binding[kn] = end[before], before
            end[kn] = start[kn] + durations[k]
            core_last[ev["nc_idx"][k]] = kn
            latest = kn if latest is None or end[kn] > end[latest] else latest
            latest_measured = max(latest_measured, ev["end_ts"][k])
    if not end:
        return {"span_ns": 0, "path": [], "by_kind": {}}
    last = max(end, key=end.get)
    first = min(start.values())
    path = []
    node: tuple | None = last
    while node is not None:
        row = chain[node[1]].id if node[0] == "host" else node[1]
        kind = chain[node[1]].kind if node[0] == "host" else "kernel"
        path.append({"id": ev["id"][row], "name": ev["name"][row], "kind": kind, "start_ns": start[node] - first,
                     "duration_ns": end[node] - start[node]})
        node = binding[node]
    path.reverse()
    by_kind: dict[str, int] = defaultdict(int)
    for step in path:
        by_kind[step["kind"]] += step["duration_ns"]
    by_kind["host (between calls)"] = max(0, end[last] - first - sum(by_kind.values()))
    return {"span_ns": end[last] - first, "path": path, "by_kind": dict(by_kind)}


def what_ifs(data: ProfileData) -> list[dict]:
    """The measured replay and the standard what-ifs, each with its span against the measured one."""
    base = replay(data)
    cases = [("as measured", WhatIf())]
    cases += [(f"kernels at their estimated {g} time", WhatIf(generation=g)) for g in data.generations]
    cases += [(f"{e} twice as fast", WhatIf(engine=e)) for e in ("TensorE", "VectorE", "DMA")]
    if any(n.startswith(FALLBACK_PREFIX) for n in data.events["name"]):
        cases.append(("CPU fallbacks removed", WhatIf(remove_fallbacks=True)))
    out = []
    for label, what in cases:
        result = base if label == "as measured" else replay(data, what)
        out.append({"what_if": label, "span_ns": result["span_ns"],
                    "speedup": base["span_ns"] / result["span_ns"] if result["span_ns"] else None,
                    "critical_path_steps": len(result["path"]), "by_kind": result["by_kind"]})
    return out
