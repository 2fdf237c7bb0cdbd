"""NeuronProfiler: writes a finished profile's trace and analysis tables to disk."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from . import analysis, cost_model
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
        hw = cost_model.hardware(nc.target, current_topology().cores_per_chip)
        profiled = ",".join(map(str, nc.cores)) or "all"
        for name, table in analysis.tables(prof, hw, nc.target, [m.value for m in nc.modes], profiled).items():
            pq.write_table(table, out / f"{name}.parquet")
        self.last_output_dir = out
        return out
