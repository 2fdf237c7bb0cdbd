"""NeuronProfiler: writes a finished profile's trace and analysis tables to disk."""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from . import analysis, cost_model, explorer_schema
from .config import NeuronConfig

TRACE_FILE = "framework_trace.json"


class NeuronProfiler:
    """``NeuronProfiler(nc).export_trace`` is an ``on_trace_ready`` handler: each call writes
    ``<profile_output_dir>/<host>_pid_<pid>/<timestamp>/`` with the framework trace (Chrome trace
    JSON, one lane per core and stream) and the Parquet tables of :mod:`.analysis`."""

    def __init__(self, config: NeuronConfig) -> None:
        self.config = config
        self.last_output_dir: Path | None = None

    def export_trace(self, prof: torch.profiler.profile) -> Path:
        from ..runtime import current_topology
        nc = self.config
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime()) + f"_{time.time_ns() % 10**9:09d}"
        out = Path(nc.profile_output_dir) / f"{socket.gethostname()}_pid_{os.getpid()}" / stamp
        out.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(out / TRACE_FILE))
        hw = cost_model.hardware(nc.target, current_topology().logical_nc_config)
        profiled = ",".join(map(str, nc.cores)) or "all"
        tables = analysis.tables(prof, hw, nc.target, [m.value for m in nc.modes], profiled)
        for name, table in tables.items():
            pq.write_table(table, out / f"{name}.parquet")
        pq.write_table(explorer_schema.schema_fields(), out / "SchemaFields.parquet")
        add_counter_tracks(out / TRACE_FILE, tables["CpuUtilization"].to_pylist(), tables["HostMemory"].to_pylist())
        self.last_output_dir = out
        return out


def add_counter_tracks(trace: Path, cpu: list[dict], memory: list[dict]) -> None:
    """Adds the CPU_UTIL / HOST_MEMORY samples to the trace as counter tracks of the process."""
    if not cpu and not memory:
        return
    data = json.loads(trace.read_text())
    base_us = data.get("baseTimeNanoseconds", 0) / 1e3  # trace times are relative to it

    def counter(name: str, row: dict, args: dict) -> dict:
        return {"ph": "C", "name": name, "pid": os.getpid(), "ts": row["time_unix_us"] - base_us, "args": args}
    data["traceEvents"] += [counter("CPU utilisation (%)", r, {"process": r["process_cpu_percent"],
                                                             "system": r["system_cpu_percent"]}) for r in cpu]
    data["traceEvents"] += [counter("Memory (bytes)", r, {"host RSS": r["host_rss_bytes"],
                                                        "device allocated": r["device_allocated_bytes"],
                                                        "device reserved": r["device_reserved_bytes"]}) for r in memory]
    trace.write_text(json.dumps(data))
