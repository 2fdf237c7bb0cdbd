"""Analysis tables of a recorded profile, named after the Neuron Explorer schema.

Measured figures come from the simulator (device kernels timed on the simulated cores, CPU
fallbacks timed on the host); every ``estimated_*`` column comes from the cost model for the
target chip (:mod:`.cost_model`) or, for kernel-language kernels, from the kernel simulator's
per-engine accounting. See docs/profiling.md for the columns.
"""
from __future__ import annotations

import bisect
import importlib.metadata
import json
import os
import platform
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import torch
from torch.autograd import DeviceType

from nki.device import LaunchReport, launch_reports
from nki.simulator.cost_model import TENSOR, HardwareConfig, tensor_rate, transpose_flops

from .. import _C
from ..compile.cost import graph_cost
from ..compile.executable import KERNEL_PREFIX as COMPILED_PREFIX
from ..runtime import chips
from . import chip_timeline, cost_model, explorer_schema, framework_tree, gaps
from .gaps import COLLECTIVE_PREFIX, FALLBACK_PREFIX, RUNTIME_ACTIVITY

try:
    _VERSION = "torch-neuronx-sim " + importlib.metadata.version("torch-neuronx-sim")
except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
    _VERSION = "torch-neuronx-sim (source tree)"
NKI_PREFIX = "nki:"

SCHEMAS: dict[str, pa.Schema] = {
    "FrameworkOp": pa.schema([
        ("op_name", pa.string()), ("execution", pa.string()), ("is_fallback", pa.bool_()),
        ("calls", pa.int64()), ("launches", pa.int64()),
        ("device_time_us", pa.float64()), ("host_fallback_time_us", pa.float64()),
        ("estimated_chip_time_us", pa.float64()), ("estimated_engine", pa.string()),
        ("estimated_bound", pa.string()), ("estimated_flops", pa.int64()),
        ("estimated_bytes_moved", pa.int64()), ("unestimated_reason", pa.string()),
        ("source_location", pa.string()),
    ]),
    "Collective": pa.schema([
        ("kernel_name", pa.string()), ("collective", pa.string()), ("core", pa.int64()),
        ("group_size", pa.int64()), ("transport", pa.string()), ("dtype", pa.string()),
        ("bytes", pa.int64()), ("device_time_us", pa.float64()), ("algbw_gbps", pa.float64()),
        ("busbw_gbps", pa.float64()), ("estimated_time_us", pa.float64()),
        ("estimated_algbw_gbps", pa.float64()), ("estimated_busbw_gbps", pa.float64()),
    ]),
    # Neuron Explorer's tables (explorer_schema.py, profile schema 7.4.0).
    **{name: table.schema for name, table in explorer_schema.TABLES.items()},
    "RuntimeApi": pa.schema([
        ("name", pa.string()), ("calls", pa.int64()), ("host_time_us", pa.float64()),
        ("max_host_time_us", pa.float64()),
    ]),
    "CpuUtilization": pa.schema([
        ("time_unix_us", pa.float64()), ("interval_us", pa.float64()),
        ("process_cpu_percent", pa.float64()), ("system_cpu_percent", pa.float64()),
    ]),
    "HostMemory": pa.schema([
        ("time_unix_us", pa.float64()), ("host_rss_bytes", pa.int64()),
        ("device_allocated_bytes", pa.int64()), ("device_reserved_bytes", pa.int64()),
        ("device_allocated_bytes_per_core", pa.list_(pa.int64())),
        ("device_reserved_bytes_per_core", pa.list_(pa.int64())),
    ]),
}


@dataclass
class _Op:
    execution: str = "native"
    calls: int = 0
    launches: int = 0
    device_ns: int = 0
    fallback_ns: int = 0
    estimated_s: float = 0.0
    engine: Counter = field(default_factory=Counter)  # estimated seconds per engine
    bound: Counter = field(default_factory=Counter)
    flops: int = 0
    bytes: int = 0
    model_flops: int = 0        # matrix FLOPs of the model run on TensorE
    transpose_flops: int = 0    # TensorE FLOPs spent on transposes (kernel-language kernels)
    model_peak_s: float = 0.0   # model_flops at TensorE's peak for their dtype
    transpose_peak_s: float = 0.0
    estimated: bool = False
    unestimated_reason: str | None = None
    source: str = ""


def _kind(kernel: str) -> str:
    if kernel.startswith(FALLBACK_PREFIX):
        return "fallback"
    if kernel.startswith(COMPILED_PREFIX):
        return "compiled"
    if kernel.startswith(COLLECTIVE_PREFIX):
        return "collective"
    return "kernel-language" if kernel.startswith(NKI_PREFIX) else "native"


def _source(stack: list[str]) -> str:
    """Innermost user frame of a recorded stack (with_stack=True), skipping torch internals."""
    return next((f for f in stack if "/torch/" not in f and "torch_neuronx/" not in f), "")


class _LaunchReports:
    """Finds the simulator report of a recorded kernel-language launch: the one that ran on the
    same core, under the same name, inside the kernel's measured interval."""

    def __init__(self, start_ns: int, end_ns: int) -> None:
        self._by_kernel: dict[tuple[int, str], list[LaunchReport]] = defaultdict(list)
        for r in sorted(launch_reports(start_ns, end_ns), key=lambda r: r.start_ns):
            self._by_kernel[(r.device, r.kernel)].append(r)
        self._starts = {key: [r.start_ns for r in rs] for key, rs in self._by_kernel.items()}

    def find(self, kernel: Any) -> LaunchReport | None:
        key = (kernel.device_index(), kernel.name())
        reports = self._by_kernel.get(key, [])
        i = bisect.bisect_left(self._starts.get(key, []), kernel.start_ns())
        if i < len(reports) and reports[i].end_ns <= kernel.end_ns():
            return reports[i]
        return None


def _instruction_rows(nki_launches: list) -> tuple[list[dict], list[dict], Counter]:
    """Explorer's Instruction rows of the recorded kernel-language launches: each launch starts at
    its measured start on the simulated core, and inside it the simulator's estimated schedule with
    data dependencies (``RunReport.dependent_schedule``: an instruction waits for the instructions
    that wrote what it reads); the Flow edges of those dependencies; the instruction count per
    engine."""
    rows: list[dict] = []
    edges: list[dict] = []
    per_engine: Counter = Counter()
    ordinals: Counter = Counter()
    for k, launch in sorted(nki_launches, key=lambda kl: kl[0].start_ns()):
        launch_index = ordinals[k.name()]
        ordinals[k.name()] += 1
        pcs: Counter = Counter()
        first = len(rows)  # the row id of the launch's instruction 0
        records = launch.report.instructions
        for i, ((begin, waited, _), r) in enumerate(zip(launch.report.dependent_schedule(), records)):
            start = k.start_ns() + round(begin * 1e9)
            end = k.start_ns() + round((begin + r.seconds) * 1e9)
            rows.append({
                "start_ts": start, "end_ts": end, "duration_ns": end - start,
                "engine": explorer_schema.ENGINE_NAMES[r.engine], "opcode": r.opcode,
                "operands": f"shape={list(r.shape)} dtype={r.dtype}", "id": len(rows), "pc": pcs[r.engine],
                "bir_id": f"{k.name()}:{launch_index}:{i}", "pcore_idx": 0, "nki_source_location": r.location,
                "raw_flops": r.flops, "hbm_read_bytes": r.dma_bytes, "kernel_name": k.name(),
                "core": k.device_index(), "dtype": r.dtype, "launch": launch_index,
                "program_id": str(list(r.program_id)),
                "waited_for": None if waited is None else first + waited})
            edges += [{"in_id": first + d, "out_id": first + i, "in_table": "Instruction", "out_table": "Instruction",
                       "dependency_type": "data", "gap_time": max(0, start - rows[first + d]["end_ts"]),
                       "waited_for": None} for d in r.depends_on]
            pcs[r.engine] += 1
            per_engine[r.engine] += 1
    return rows, edges, per_engine


def _active_rows(instructions: list[dict]) -> list[dict]:
    """Explorer's ActiveTime: the merged intervals of each engine's instructions, per core."""
    by_engine: dict[tuple[str, int, int], list[tuple[int, int]]] = defaultdict(list)
    for r in instructions:
        by_engine[(r["engine"], r["core"], r["pcore_idx"])].append((r["start_ts"], r["end_ts"]))
    return [{"start_ts": s, "end_ts": e, "engine": engine, "pcore_idx": pcore, "duration_ns": e - s}
            for (engine, _, pcore), spans in sorted(by_engine.items()) for s, e in framework_tree.merged(spans)]


def _opcode_rows(instructions: list[dict]) -> list[dict]:
    """Explorer's OpcodeSummary: per (engine, opcode), the instructions' count, their summed time,
    the time at least one runs (merged) and that as a percent of the instructions' whole span."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in instructions:
        groups[(r["engine"], r["opcode"])].append(r)
    span = (max(r["end_ts"] for r in instructions) - min(r["start_ts"] for r in instructions)) if instructions else 0
    rows = []
    for (engine, opcode), group in sorted(groups.items()):
        active = sum(e - s for s, e in framework_tree.merged([(r["start_ts"], r["end_ts"]) for r in group]))
        rows.append({"engine": engine, "opcode": opcode, "instruction_count": len(group),
                     "instruction_time_ns": sum(r["duration_ns"] for r in group), "active_time_ns": active,
                     "active_time_percent": 100 * active / span if span else 0.0})
    return rows


def runtime_rows(events: list) -> list[dict]:
    """RUNTIME mode: the runtime's host-side calls (launches, synchronize waits) by name."""
    spans: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.activity_type() == RUNTIME_ACTIVITY:
            spans[e.name()].append(e.duration_ns() / 1e3)
    return [{"name": name, "calls": len(us), "host_time_us": sum(us), "max_host_time_us": max(us)}
            for name, us in sorted(spans.items())]


def cpu_rows(samples: list[dict]) -> list[dict]:
    """CPU_UTIL mode: utilisation over each interval between samples. The process figure is in
    cores (100% = one core busy), the system figure over all CPUs."""
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    rows = []
    for before, after in zip(samples, samples[1:]):
        seconds = (after["time_ns"] - before["time_ns"]) / 1e9
        total = after["system_total_ticks"] - before["system_total_ticks"]
        process = (after["process_cpu_ticks"] - before["process_cpu_ticks"]) / ticks_per_s
        busy = after["system_busy_ticks"] - before["system_busy_ticks"]
        rows.append({"time_unix_us": after["time_ns"] / 1e3, "interval_us": seconds * 1e6,
                     "process_cpu_percent": 100 * process / seconds if seconds > 0 else 0.0,
                     "system_cpu_percent": 100 * busy / total if total > 0 else 0.0})
    return rows


def memory_rows(samples: list[dict]) -> list[dict]:
    """HOST_MEMORY mode: host RSS and device (HBM) memory at each sample."""
    return [{"time_unix_us": s["time_ns"] / 1e3, "host_rss_bytes": s["rss_bytes"],
             "device_allocated_bytes": sum(s["hbm_allocated_bytes"]),
             "device_reserved_bytes": sum(s["hbm_reserved_bytes"]),
             "device_allocated_bytes_per_core": s["hbm_allocated_bytes"],
             "device_reserved_bytes_per_core": s["hbm_reserved_bytes"]} for s in samples]


def _charge_simulated(op: _Op, launch: LaunchReport) -> None:
    """Adds a kernel-language launch's simulator estimate (per-engine accounting) to its operator."""
    report = launch.report
    op.estimated = True
    op.estimated_s += report.estimated_seconds
    op.flops += report.flops
    op.bytes += report.dma_bytes
    for engine, busy in report.engine_busy_seconds.items():
        op.engine[engine] += busy
    for r in report.instructions:
        if r.engine != TENSOR:
            continue
        peak = tensor_rate(report.config, r.dtype)
        if r.opcode == "transpose":
            flops = transpose_flops(*r.shape)
            op.transpose_flops += flops
            op.transpose_peak_s += flops / peak
        else:
            op.model_flops += r.flops
            op.model_peak_s += r.flops / peak


def _charge(op: _Op, kind: str, est: cost_model.Estimate | None) -> None:
    """Adds one call's cost-model estimate to its operator."""
    if est is None:
        return
    op.estimated = True
    op.flops += est.flops
    op.bytes += est.bytes_moved
    op.bound[est.bound] += 1
    if est.engine == TENSOR and kind != "fallback":  # a fallback's FLOPs run on the host
        op.model_flops += est.flops
        op.model_peak_s += est.tensor_peak_seconds
    if kind == "fallback":
        # Charged with its measured host time (in tables) plus moving its tensors both ways.
        op.estimated_s += cost_model.transfer_seconds(est.bytes_moved)
    else:
        op.estimated_s += est.seconds
        op.engine[est.engine] += est.seconds


def _charge_or_explain(op: _Op, kind: str, estimate: Callable[[], cost_model.Estimate | None]) -> None:
    """Charges an estimate, or keeps why the cost model could not make one."""
    try:
        _charge(op, kind, estimate())
    except cost_model.CostModelError as e:
        op.unestimated_reason = str(e)


def _rank() -> dict[str, int | None]:
    """The process's rank and world size in torch.distributed's default group (None outside one):
    the Explorer joins the profiles of one run's ranks by them."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    return {"rank": None, "world_size": None}


def _native_estimate(op: str, kernel: str, args: dict) -> Callable[[HardwareConfig], cost_model.Estimate | None]:
    """The cost model's estimate of a native kernel (a copy, or its operator's call) on a core."""
    return lambda hw: cost_model.estimate_copy(kernel, args, hw) or cost_model.estimate(op, args, hw)


def _collective_row(k: Any, message: dict, estimate: cost_model.Estimate) -> dict:
    """One collective kernel: its message, measured time and bandwidths (nccl-tests' algorithm
    and bus bandwidth), and the cost model's estimate on the target's interconnect."""
    seconds, size, bus = k.duration_ns() * 1e-9, message["bytes"], message["bus_factor"]
    return {"kernel_name": k.name(), "collective": message["collective"], "core": k.device_index(),
            "group_size": message["group_size"], "transport": message["transport"], "dtype": message["dtype"],
            "bytes": size, "device_time_us": seconds * 1e6,
            "algbw_gbps": size / seconds / 1e9 if seconds else None,
            "busbw_gbps": size * bus / seconds / 1e9 if seconds else None,
            "estimated_time_us": estimate.seconds * 1e6, "estimated_algbw_gbps": size / estimate.seconds / 1e9,
            "estimated_busbw_gbps": size * bus / estimate.seconds / 1e9}


def tables(prof: torch.profiler.profile, hw: HardwareConfig, target: str, modes: list[str],
           profiled_cores: str) -> dict[str, pa.Table]:
    """The analysis tables of a finished profile (``prof`` as given to ``on_trace_ready``)."""
    events = prof.profiler.kineto_results.events()
    # Operators and scopes; runtime events (RUNTIME mode) share their operator's id.
    cpu = {e.correlation_id(): e for e in events
           if e.device_type() == DeviceType.CPU and e.activity_type() != RUNTIME_ACTIVITY}
    device = [e for e in events if e.device_type() == DeviceType.PrivateUse1]
    kernel_args = _C._profiler_kernel_args()  # (core, start ns) -> the kernel's tensors (JSON)
    described: dict[int, tuple[str, str, str, dict]] = {}  # per call: op, kernel, kind, kernel's tensors
    ops: dict[str, _Op] = defaultdict(_Op)
    seen_calls: set[int] = set()
    nki_reports = _LaunchReports(min((k.start_ns() for k in device), default=0),
                                 max((k.end_ns() for k in device), default=0))
    nki_launches: list[tuple[Any, LaunchReport]] = []  # (device event, its simulator report)
    from ..runtime import current_topology
    topo = current_topology()
    collectives = []
    row_of = {id(e): i for i, e in enumerate(gaps.in_order(events))}  # event -> its SystemProfileEvents id
    costings: list[chip_timeline.KernelCosting] = []
    described_rows: dict[int, dict] = {}  # SystemProfileEvents id -> the kernel's described arguments
    for k in device:
        parent = cpu.get(k.linked_correlation_id())
        name = parent.name() if parent is not None else k.name()
        op, kind = ops[name], _kind(k.name())
        costing = chip_timeline.KernelCosting(row_of[id(k)], k.device_index(), k.name(), name, kind, k.duration_ns())
        costings.append(costing)
        op.launches += 1
        if kind == "fallback":
            op.fallback_ns += k.duration_ns()
        else:
            op.device_ns += k.duration_ns()
        if kind != "native":  # an operator's copies and bookkeeping kernels do not make it native
            op.execution = kind
        launch = nki_reports.find(k) if kind == "kernel-language" else None
        if launch is not None:
            nki_launches.append((k, launch))
            _charge_simulated(op, launch)
            costing.launch = launch
        graph = graph_cost(k.name()) if kind == "compiled" else None
        if graph is not None:  # each kernel is one execution of the graph
            _charge_or_explain(op, kind, lambda: cost_model.estimate_compiled(graph, hw))
            costing.graph = graph
        described_json = kernel_args.get((k.device_index(), k.start_ns()))
        args = json.loads(described_json) if described_json else None
        if args is not None:
            described_rows[costing.event_id] = args
        if kind == "collective" and args:
            estimate = cost_model.estimate_collective(args, target, topo.logical_nc_config)
            _charge(op, kind, estimate)
            collectives.append(_collective_row(k, args, estimate))
            costing.collective = args
        call = k.linked_correlation_id()
        if args and kind == "native":
            costing.native = _native_estimate(name, k.name(), args)
        if parent is not None and args and kind in ("native", "fallback") and call not in described:
            described[call] = (name, k.name(), kind, args)
        if parent is None or call in seen_calls:
            continue
        seen_calls.add(call)
        op.calls += 1
        op.source = op.source or _source(list(parent.stack()))
    for name, kernel, kind, args in described.values():
        _charge_or_explain(ops[name], kind, lambda: _native_estimate(name, kernel, args)(hw))
    for op in ops.values():
        if op.execution == "fallback":  # its measured host time is its estimate, FLOPs or not
            op.estimated = True
            op.estimated_s += op.fallback_ns * 1e-9
        elif op.unestimated_reason:  # partly estimated calls would understate it: none at all
            op.estimated, op.estimated_s, op.engine, op.bound = False, 0.0, Counter(), Counter()
            op.flops = op.bytes = op.model_flops = op.transpose_flops = 0
            op.model_peak_s = op.transpose_peak_s = 0.0

    framework = [{
        "op_name": name, "execution": op.execution, "is_fallback": op.execution == "fallback",
        "calls": op.calls, "launches": op.launches, "device_time_us": op.device_ns / 1e3,
        "host_fallback_time_us": op.fallback_ns / 1e3,
        "estimated_chip_time_us": op.estimated_s * 1e6 if op.estimated else None,
        "estimated_engine": op.engine.most_common(1)[0][0] if op.engine else None,
        "estimated_bound": op.bound.most_common(1)[0][0] if op.bound else None,
        "estimated_flops": op.flops if op.estimated else None,
        "estimated_bytes_moved": op.bytes if op.estimated else None,
        "unestimated_reason": None if op.estimated else op.unestimated_reason,
        "source_location": op.source or None,
    } for name, op in sorted(ops.items(), key=lambda kv: -(kv[1].device_ns + kv[1].fallback_ns))]

    instructions, instruction_flow, nki_engine_counts = _instruction_rows(nki_launches)
    opcode_rows, active = _opcode_rows(instructions), _active_rows(instructions)
    engine_s = Counter()
    for op in ops.values():
        engine_s.update(op.engine)

    starts = [e.start_ns() for e in events]
    ends = [e.end_ns() for e in events]
    wall_us = (max(ends) - min(starts)) / 1e3 if events else 0.0
    estimated_s = sum(op.estimated_s for op in ops.values())  # summed over cores
    model_flops = sum(op.model_flops for op in ops.values())
    transposes = sum(op.transpose_flops for op in ops.values())
    model_peak_s = sum(op.model_peak_s for op in ops.values())
    hardware_peak_s = model_peak_s + sum(op.transpose_peak_s for op in ops.values())
    moved = sum(op.bytes for op in ops.values())
    steps = max(1, sum(e.name().startswith("ProfilerStep#") for e in cpu.values()))
    system_events = gaps.system_events(events)
    frames = framework_tree.StackFrames()
    contexts = framework_tree.op_contexts(prof)
    for row in system_events:
        context = contexts.get(row["correlation_id"])
        if context is not None:
            row["stack_frame_id"], row["module_path"] = frames.add(context.frames), context.module_path
    first_kernel_ns = min((k.start_ns() for k in device), default=0)
    estimated, unestimated_kernels = chip_timeline.rows(costings, topo.logical_nc_config, first_kernel_ns)
    flow = gaps.flows(system_events, described_rows)
    idle = gaps.idle_by_cause(flow)
    percent = (lambda seconds: 100 * seconds / estimated_s if estimated_s else None)  # noqa: E731
    summary = {
        "total_time": estimated_s, "model_flops": model_flops, "hardware_flops": model_flops + transposes,
        "transpose_flops": transposes,
        # Utilisations over the estimated time, which already sums every core's busy time: the
        # time TensorE would need at its peak for each FLOP's dtype, over the time taken.
        "mfu_estimated_percent": percent(model_peak_s), "hfu_estimated_percent": percent(hardware_peak_s),
        "mbu_estimated_percent": percent(moved / hw.dma_bytes_per_s),
        **{f"{prefix}_active_time": engine_s[e] for e, prefix in explorer_schema.SUMMARY_ENGINES.items()},
        **{f"{prefix}_active_time_percent": percent(engine_s[e])
           for e, prefix in explorer_schema.SUMMARY_ENGINES.items()},
        **{f"{prefix}_instruction_count": nki_engine_counts[e]
           for e, prefix in explorer_schema.SUMMARY_ENGINES.items() if e != "DMA"},
        "steps": steps, "wall_time_us": wall_us,
        "device_time_us": sum(op.device_ns for op in ops.values()) / 1e3,
        "host_fallback_time_us": sum(op.fallback_ns for op in ops.values()) / 1e3,
        "estimated_step_time_us": estimated_s * 1e6 / steps,
        "kernels": len(device),
        "fallback_ops": sum(op.execution == "fallback" for op in ops.values()),
        "unestimated_ops": sum(not op.estimated for op in ops.values()),
        **{explorer_schema.idle_field(cause): idle.get(cause, 0) for cause in explorer_schema.IDLE_CAUSES},
    }
    first_ns, last_ns = (min(starts), max(ends)) if events else (0, 0)
    chip = chips.CHIPS[target]
    metadata = {
        "profile_schema_version": explorer_schema.SCHEMA_VERSION, "num_physical_cores": topo.logical_nc_config,
        "vnc_enabled": topo.logical_nc_config > 1, "first_hw_timestamp": first_ns, "last_hw_timestamp": last_ns,
        **{f"{e}_engine_clock_freq": chip.engine_clock_hz[e] / 1e9 for e in ("tensor", "vector", "scalar", "gpsimd")},
        "instance_type": chips.DEFAULT_INSTANCE[target], "explorer_version": _VERSION,
        "profile_name": None,
        "is_simulation": True, "chip_generation": topo.generation, "target_generation": target,
        "engine_clock_hz": hw.clock_hz, "cores": len(topo.visible_cores),
        "cores_per_chip": topo.cores_per_chip, "logical_nc_config": topo.logical_nc_config,
        "profiled_cores": profiled_cores, "chip_timeline_unestimated": json.dumps(unestimated_kernels),
        **_rank(),
        "tensor_flops_bf16_per_core": hw.tensor_flops_bf16, "vector_flops_per_core": hw.vector_flops,
        "vector_elements_per_s_per_core": hw.vector_elements_per_s,
        "hbm_bytes_per_s_per_core": hw.dma_bytes_per_s,
        "host_link_bytes_per_s": cost_model.HOST_LINK_BYTES_PER_S, "modes": ",".join(modes),
        "host": platform.node(), "torch_version": torch.__version__, "created_unix_s": time.time(),
        "note": "device times are measured on the simulator; estimated_* columns are cost-model "
                "estimates for the target chip, not measurements",
    }
    samples = _C._profiler_samples()  # taken only in CPU_UTIL / HOST_MEMORY modes
    rows = {"FrameworkOp": framework, "Collective": collectives, "Instruction": instructions,
            "OpcodeSummary": opcode_rows,
            "ActiveTime": active, "Summary": [summary], "Metadata": [metadata],
            "SystemProfileEvents": system_events, "Flow": flow + instruction_flow, **frames.tables(),
            "FrameworkNode": framework_tree.nodes(system_events), "EstimatedActivity": estimated,
            "RuntimeApi": runtime_rows(events) if "runtime" in modes else [],
            "CpuUtilization": cpu_rows(samples) if "cpu_util" in modes else [],
            "HostMemory": memory_rows(samples) if "host_memory" in modes else []}
    return {name: pa.Table.from_pylist(rows[name], schema=schema) for name, schema in SCHEMAS.items()}
