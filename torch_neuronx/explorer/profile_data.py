"""One exported profile loaded for the Explorer UI: the queries behind each view.

The tables are read once with pyarrow into NumPy columns; timeline windows are cut with binary
search on per-row sorted starts and, when a row holds more events than the window has pixels,
aggregated into per-pixel bins (count and busy fraction), so a million-event profile answers a
pan or zoom with at most a few thousand items.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..profiling.gaps import COLLECTIVE_PREFIX, FALLBACK_PREFIX, SYNCS, Spans

CHIP = "chip"  # the estimated chip timeline's view name (the other: "system")


def _read(profile: Path, table: str) -> list[dict]:
    path = profile / f"{table}.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else []


@dataclass
class Row:
    """One drawn row of a timeline: a lane (thread, core, engine) at one nesting depth."""

    label: str
    group: str
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray         # event ids (SystemProfileEvents or EstimatedActivity row)
    names: np.ndarray       # indexes into Timeline.names
    max_duration: int


class Timeline:
    """Events grouped into rows, each sorted by start."""

    def __init__(self, rows: list[Row], names: list[str]) -> None:
        self.rows, self.names = rows, names
        starts = [r.starts[0] for r in rows if len(r.starts)]
        self.start = int(min(starts)) if starts else 0
        self.end = int(max((r.ends.max() for r in rows if len(r.ends)), default=0))

    def window(self, start: int, end: int, pixels: int) -> list[dict]:
        """Per row, its events overlapping [start, end) or, when more than ``pixels``, per-pixel bins."""
        out = []
        span = max(end - start, 1)
        for index, row in enumerate(self.rows):
            lo = np.searchsorted(row.starts, start - row.max_duration, "left")
            hi = np.searchsorted(row.starts, end, "left")
            s, e = row.starts[lo:hi], row.ends[lo:hi]
            keep = e > start
            s, e, ids, names = s[keep], e[keep], row.ids[lo:hi][keep], row.names[lo:hi][keep]
            if len(s) <= pixels:
                events = [[int(a), int(b), int(i), self.names[n]] for a, b, i, n in zip(s, e, ids, names)]
                out.append({"row": index, "events": events})
                continue
            first = np.clip((s - start) * pixels // span, 0, pixels - 1)
            busy = np.zeros(pixels)
            np.add.at(busy, first, np.minimum(e, end) - np.maximum(s, start))
            count = np.bincount(first, minlength=pixels)
            bins = [[int(start + p * span // pixels), int(count[p]), float(min(1.0, busy[p] * pixels / span))]
                    for p in np.nonzero(count)[0]]
            out.append({"row": index, "bins": bins, "bin_ns": span / pixels})
        return out

    def labels(self) -> list[dict]:
        return [{"label": r.label, "group": r.group, "events": int(len(r.starts))} for r in self.rows]


def _depths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The nesting depth of each interval (sorted by start) among those that contain it."""
    depth = np.zeros(len(starts), dtype=np.int64)
    open_ends: list[int] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while open_ends and open_ends[-1] <= s:
            open_ends.pop()
        depth[i] = len(open_ends)
        open_ends.append(e)
    return depth


def _rows(groups: dict[tuple, dict[str, list]], names: dict[str, int], nest: bool) -> list[Row]:
    out = []
    for (_, group, label), cols in sorted(groups.items(), key=lambda kv: kv[0]):
        starts, ends = np.asarray(cols["start"], np.int64), np.asarray(cols["end"], np.int64)
        order_ = np.lexsort((-ends, starts))
        starts, ends = starts[order_], ends[order_]
        ids = np.asarray(cols["id"], np.int64)[order_]
        name_ids = np.asarray([names.setdefault(n, len(names)) for n in cols["name"]], np.int64)[order_]
        depth = _depths(starts, ends) if nest else np.zeros(len(starts), np.int64)
        for d in range(int(depth.max()) + 1 if len(depth) else 0):
            pick = depth == d
            out.append(Row(label if d == 0 else f"{label} [{d}]", group, starts[pick], ends[pick], ids[pick],
                           name_ids[pick], int((ends[pick] - starts[pick]).max())))
    return out


class ProfileData:
    """An exported profile directory and the answers of the Explorer's API over it."""

    def __init__(self, profile: Path) -> None:
        self.path = profile
        self.meta = (_read(profile, "Metadata") or [{}])[0]
        self.summary = (_read(profile, "Summary") or [{}])[0]
        self.ops = _read(profile, "FrameworkOp")
        self.events = pq.read_table(profile / "SystemProfileEvents.parquet").to_pydict()
        # Edges between events (Instruction edges are the kernel waits, read from EstimatedActivity).
        self.flows = [f for f in _read(profile, "Flow") if f["in_table"] == "SystemProfileEvents"]
        self.instructions = _read(profile, "Instruction")
        self.estimated = _read(profile, "EstimatedActivity")
        self._frames = self._stack_frames()
        self._by_id = {i: n for n, i in enumerate(self.events["id"])}
        self._flows_in, self._flows_out = defaultdict(list), defaultdict(list)
        for f in self.flows:
            self._flows_out[f["in_id"]].append(f)
            self._flows_in[f["out_id"]].append(f)
        self._correlated: dict[int, list[int]] = defaultdict(list)
        for i, c in zip(self.events["id"], self.events["correlation_id"]):
            if c:
                self._correlated[c].append(i)
        self.system = self._system_timeline()
        self.generations = sorted({r["generation"] for r in self.estimated})
        self._chip: dict[str, Timeline] = {}
        # Each kernel's estimated activities summed per generation (the details and the hierarchy).
        self._estimated_ns: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in self.estimated:
            self._estimated_ns[r["event_id"]][r["generation"]] += r["duration_ns"]

    # -- tables --------------------------------------------------------------------------------
    def _stack_frames(self) -> dict[int, tuple[str, int, str, int]]:
        """Frame id -> (file, line, function, parent frame id)."""
        files = {int(r["id"]): r["name"] for r in _read(self.path, "StackFrameFileName")}
        functions = {int(r["id"]): r["name"] for r in _read(self.path, "StackFrameFunctionName")}
        locations = {int(r["id"]): (files[r["file_name_id"]], r["line_number"], functions[r["function_name_id"]])
                     for r in _read(self.path, "StackFrameFileLocation")}
        return {int(r["id"]): (*locations[r["file_location_id"]], int(r["parent_frame_id"]))
                for r in _read(self.path, "StackFrame")}

    def stack(self, frame_id: int | None) -> list[dict]:
        """The user frames of a stack, innermost first."""
        out = []
        while frame_id:
            file, line, function, frame_id = self._frames[frame_id]
            out.append({"file": file, "line": line, "function": function})
        return out

    def event(self, event_id: int) -> dict[str, Any]:
        n = self._by_id[event_id]
        return {k: v[n] for k, v in self.events.items()}

    # -- timelines -----------------------------------------------------------------------------
    def _system_timeline(self) -> Timeline:
        groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        ev = self.events
        for i, name, s, e, src, thread, core in zip(ev["id"], ev["name"], ev["start_ts"], ev["end_ts"],
                                                     ev["trace_event_source"], ev["thread_id"], ev["nc_idx"]):
            if src == "neuron_hw":
                fallback = name.startswith(FALLBACK_PREFIX)
                key = (0, "device", f"core {core}" + (" · CPU fallbacks (host)" if fallback else " · kernels"))
            elif src == "neuron_rt":
                key = (1, "runtime", f"runtime · thread {thread}")
            else:  # the Python tracer's other threads have no thread id (-1): last
                key = (2 if thread != -1 else 3, "framework", f"framework · thread {thread}")
            cols = groups[key]
            cols["id"].append(i)
            cols["name"].append(name)
            cols["start"].append(s)
            cols["end"].append(e)
        names: dict[str, int] = {}
        rows = _rows(groups, names, nest=True)
        return Timeline(rows, list(names))

    def chip(self, generation: str) -> Timeline:
        """The estimated chip timeline of ``generation``: a row per core and engine."""
        if generation not in self._chip:
            groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
            for n, r in enumerate(self.estimated):
                if r["generation"] != generation:
                    continue
                cols = groups[(r["core"], "chip", f"core {r['core']} · {r['engine']}")]
                cols["id"].append(n)
                cols["name"].append(r["name"])
                cols["start"].append(r["start_ts"])
                cols["end"].append(r["end_ts"])
            names: dict[str, int] = {}
            self._chip[generation] = Timeline(_rows(groups, names, nest=False), list(names))
        return self._chip[generation]

    def timeline(self, view: str, generation: str | None = None) -> Timeline:
        if view == CHIP:
            if generation not in self.generations:
                raise KeyError(f"no estimated timeline for {generation!r}: the profile has {self.generations}")
            return self.chip(generation)
        return self.system

    # -- one event -----------------------------------------------------------------------------
    def _brief(self, event_id: int) -> dict:
        n = self._by_id[event_id]
        return {"id": event_id, "name": self.events["name"][n], "source": self.events["trace_event_source"][n],
                "start_ts": self.events["start_ts"][n], "duration_ns": self.events["duration_ns"][n]}

    def details(self, event_id: int) -> dict[str, Any]:
        """An event with its stack, module, correlated events, dependencies and chip estimates."""
        row = self.event(event_id)
        return {"event": row, "stack": self.stack(row.get("stack_frame_id")),
                "correlated": [self._brief(i) for i in self._correlated.get(row["correlation_id"], [])
                               if i != event_id],
                "predecessors": [{**f, "event": self._brief(f["in_id"])} for f in self._flows_in[event_id]],
                "successors": [{**f, "event": self._brief(f["out_id"])} for f in self._flows_out[event_id]],
                "estimated_ns": dict(self._estimated_ns.get(event_id, {}))}

    def estimated_details(self, row: int) -> dict[str, Any]:
        """One EstimatedActivity row with the measured kernel it re-times."""
        r = self.estimated[row]
        return {"activity": r, "kernel": self.details(r["event_id"])}

    # -- idle gaps -----------------------------------------------------------------------------
    def gaps(self) -> list[dict]:
        """Every idle gap of a core (a stream-order edge with a gap), with what it waited for and
        the host event behind it."""
        ev = self.events

        def spans(rows: list[int]) -> Spans:
            return Spans([{"n": n, "start_ts": ev["start_ts"][n], "end_ts": ev["end_ts"][n]} for n in rows])
        names, sources = ev["name"], ev["trace_event_source"]
        syncs = spans([n for n, name in enumerate(names) if name in SYNCS and sources[n] != "neuron_hw"])
        fallbacks = spans([n for n, name in enumerate(names) if name.startswith(FALLBACK_PREFIX)])
        out = []
        for f in self.flows:
            if f["dependency_type"] != "stream order" or not f["gap_time"]:
                continue
            before, after = self.event(f["in_id"]), self.event(f["out_id"])
            out.append({"core": before["nc_idx"], "start_ts": before["end_ts"], "end_ts": after["start_ts"],
                        "gap_ns": f["gap_time"], "waited_for": f["waited_for"], "before": self._brief(f["in_id"]),
                        "after": self._brief(f["out_id"]),
                        "culprit": self._culprit(f["waited_for"], before, after, syncs, fallbacks)})
        return out

    def _culprit(self, cause: str, before: dict, after: dict, syncs: Spans, fallbacks: Spans) -> dict | None:
        """The event a gap waited for: the host sync or the fallback it overlaps, the launch of the
        next kernel, or the collective itself."""
        ev = self.events
        start, end = before["end_ts"], after["start_ts"]
        if cause == "host sync":  # the outermost sync holding the gap's start
            pick = [r["n"] for r in reversed(syncs.overlapping(start, start))]
        elif cause == "cpu fallback":
            pick = [r["n"] for r in reversed(fallbacks.overlapping(start, end))
                    if r["start_ts"] < end and r["end_ts"] > start]
        elif cause == "host launch":
            pick = [self._by_id[i] for i in self._correlated.get(after["correlation_id"], [])
                    if ev["trace_event_source"][self._by_id[i]] == "framework"]
        else:
            pick = [self._by_id[after["id"]]]
        if not pick:
            return None
        n = pick[0]
        return {**self._brief(ev["id"][n]), "stack": self.stack(ev["stack_frame_id"][n])}

    # -- inside kernel-language kernels ---------------------------------------------------------
    def kernel_waits(self, generation: str) -> list[dict]:
        """ESTIMATED engine waits inside kernel-language kernels on ``generation``: per kernel,
        engine and what it waited for (the engine, opcode and line of the producing instruction),
        the waits' count and total."""
        groups: dict[tuple, list[int]] = defaultdict(list)
        for r in self.estimated:
            if r["generation"] == generation and r["waited_for"]:
                groups[(r["kernel_name"], r["engine"], r["waited_for"])].append(r["wait_ns"])
        return sorted(({"kernel": k, "engine": e, "waited_for": w, "waits": len(ns), "wait_ns": sum(ns)}
                       for (k, e, w), ns in groups.items()), key=lambda g: -g["wait_ns"])

    # -- collectives across ranks ----------------------------------------------------------------
    def _collective_rows(self) -> list[int]:
        ev = self.events
        rows = [n for n, (src, name) in enumerate(zip(ev["trace_event_source"], ev["name"]))
                if src == "neuron_hw" and name.startswith(COLLECTIVE_PREFIX)]
        return sorted(rows, key=lambda n: ev["start_ts"][n])

    def collectives(self, peers: list[ProfileData]) -> list[dict]:
        """Each collective of this rank with the arrival (kernel start) of the same collective on
        every peer rank (the k-th collective kernel of each, matched by name): the slowest rank,
        the one that arrived last, and how long this rank waited for it."""
        mine = self.meta.get("rank")
        theirs = [(p.meta.get("rank"), p, p._collective_rows()) for p in peers]
        out = []
        for k, n in enumerate(self._collective_rows()):
            name = self.events["name"][n]
            arrivals = {mine: self.events["start_ts"][n]}
            for rank, peer, rows in theirs:
                if k < len(rows) and _collective(peer.events["name"][rows[k]]) == _collective(name):
                    arrivals[rank] = peer.events["start_ts"][rows[k]]
            slowest = max(arrivals, key=arrivals.get)
            first = min(arrivals.values())
            out.append({"index": k, "name": name, "event_id": self.events["id"][n], "rank": mine,
                        "duration_ns": self.events["duration_ns"][n], "slowest_rank": slowest,
                        "waited_ns": arrivals[slowest] - arrivals[mine],
                        "arrivals_ns": {str(r): t - first for r, t in sorted(arrivals.items(), key=str)}})
        return out

    # -- source --------------------------------------------------------------------------------
    @functools.cached_property
    def _line_events(self) -> dict[tuple[str, int], list[int]]:
        """(file, line) -> the events whose stack passes through it."""
        lines: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, frame in zip(self.events["id"], self.events["stack_frame_id"]):
            for f in self.stack(frame):
                lines[(f["file"], f["line"])].append(i)
        return lines

    def sources(self) -> list[dict]:
        """Files with events, and kernel-language files with instructions, by device time."""
        totals: dict[str, dict] = defaultdict(lambda: {"device_ns": 0, "events": 0, "estimated_instruction_ns": 0})
        for (file, _), ids in self._line_events.items():
            totals[file]["events"] += len(ids)
            totals[file]["device_ns"] += sum(self.events["duration_ns"][self._by_id[i]] for i in ids
                                             if self.events["trace_event_source"][self._by_id[i]] == "neuron_hw")
        for r in self.instructions:
            file, _, _ = (r["nki_source_location"] or "").rpartition(":")
            if file:
                totals[file]["estimated_instruction_ns"] += r["duration_ns"]
        return sorted(({"file": f, **t} for f, t in totals.items()), key=lambda t: -t["device_ns"])

    def source(self, file: str) -> dict[str, Any]:
        """A file's lines with, per line, its events and their device time, and its kernel-language
        instructions' estimated time."""
        known = {f for f, _ in self._line_events} | {
            (r["nki_source_location"] or "").rpartition(":")[0] for r in self.instructions}
        if not file or file not in known:
            raise KeyError(f"{file} is not a source file of this profile")
        per_line: dict[int, dict] = defaultdict(lambda: {"events": [], "device_ns": 0, "host_ns": 0,
                                                          "instructions": 0, "estimated_instruction_ns": 0})
        for (f, line), ids in self._line_events.items():
            if f != file:
                continue
            entry = per_line[line]
            for i in ids:
                n = self._by_id[i]
                entry["events"].append(i)
                key = "device_ns" if self.events["trace_event_source"][n] == "neuron_hw" else "host_ns"
                entry[key] += self.events["duration_ns"][n]
        for r in self.instructions:
            f, _, line = (r["nki_source_location"] or "").rpartition(":")
            if f == file and line.isdigit():
                per_line[int(line)]["instructions"] += 1
                per_line[int(line)]["estimated_instruction_ns"] += r["duration_ns"]
        try:
            text = Path(file).read_text().splitlines()
        except OSError as e:
            text = [f"# the source is not readable here: {e}"]
        return {"file": file, "lines": text,
                "per_line": {line: {**v, "event_count": len(v["events"]), "events": v["events"][:200]}
                             for line, v in per_line.items()}}

    # -- hierarchy -----------------------------------------------------------------------------
    def hierarchy(self, generation: str | None = None) -> dict:
        """module ▸ operator ▸ kernel ▸ instruction, with the kernels' measured device time and
        estimated chip time rolled up at each level."""
        generation = generation or self.meta.get("target_generation")
        estimated = {i: by_generation.get(generation, 0) for i, by_generation in self._estimated_ns.items()}
        op_of = {}
        for src, c, name in zip(self.events["trace_event_source"], self.events["correlation_id"],
                                self.events["name"]):
            if src == "framework" and c:
                op_of[c] = name  # the innermost operator of the call: the one that launched
        root = _node("profile", "profile")
        for i, src, c, name, path, dur in zip(self.events["id"], self.events["trace_event_source"],
                                              self.events["correlation_id"], self.events["name"],
                                              self.events["module_path"], self.events["duration_ns"]):
            if src != "neuron_hw":
                continue
            node = root
            levels = [("module", m) for m in (path.split("/") if path else ["(no module)"])]
            for level, label in levels + [("operator", op_of.get(c, name)), ("kernel", name)]:
                node = node["children"].setdefault(label, _node(label, level))
                node["device_ns"] += dur
                node["estimated_ns"] += estimated.get(i, 0)
                node["count"] += 1
            root["device_ns"] += dur
            root["estimated_ns"] += estimated.get(i, 0)
            root["count"] += 1
        kernels = _kernel_nodes(root)
        for r in self.instructions:
            for kernel in kernels.get(r["kernel_name"], []):
                leaf = kernel["children"].setdefault(f"{r['engine']} {r['opcode']}", _node(
                    f"{r['engine']} {r['opcode']}", "instruction"))
                leaf["estimated_ns"] += r["duration_ns"]
                leaf["count"] += 1
        return _listed(root)

    # -- summary -------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        return {"profile": str(self.path), "metadata": self.meta, "summary": self.summary,
                "top_operators": self.ops[:15], "fallbacks": [o for o in self.ops if o["is_fallback"]],
                "generations": self.generations, "timeline": {"start": self.system.start, "end": self.system.end}}


def _collective(kernel: str) -> str:
    """A collective kernel's name without its rank ("c10d::all_reduce (rank 0 of 2)")."""
    return kernel.split(" (rank ", 1)[0]


def _node(label: str, level: str) -> dict:
    return {"name": label, "level": level, "device_ns": 0, "estimated_ns": 0, "count": 0, "children": {}}


def _kernel_nodes(root: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    pending = [root]
    while pending:
        node = pending.pop()
        if node["level"] == "kernel":
            out[node["name"]].append(node)
        pending.extend(node["children"].values())
    return out


def _listed(node: dict) -> dict:
    children = sorted((_listed(c) for c in node["children"].values()), key=lambda c: -(c["device_ns"] or
                                                                                       c["estimated_ns"]))
    return {**node, "children": children}
