"""How the Explorer copes with a big profile: a synthetic profile of N events (default one
million: framework operators on a host thread, one kernel per operator on each of 2 cores),
written with the profile's own schema, then timed side by side:

- loading it (ProfileData: Parquet -> NumPy rows, nesting depths),
- the whole-profile timeline window at 1,500 pixels (aggregated into per-pixel bins),
- 20 pans of a window holding 1/1000 of the profile (individual events),
- the same window queries answered by the HTTP server (JSON over loopback).

    python benchmarks/explorer_scale.py [--events 1000000]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from torch_neuronx.profiling import explorer_schema


def write_profile(directory: Path, events: int) -> Path:
    """A profile of ``events`` SystemProfileEvents rows (a third framework ops, two thirds kernels)."""
    ops = events // 3
    starts = np.arange(ops, dtype=np.int64) * 10_000
    op_cols = {"start_ts": starts, "end_ts": starts + 6_000}
    kernel_starts = np.concatenate([starts + 2_000, starts + 3_000])
    kernel_ends = kernel_starts + np.tile(np.int64(5_000), 2 * ops)
    n = 3 * ops
    table = pa.table({
        "id": np.arange(n, dtype=np.int64),
        "name": np.array(["aten::mm", "aten::add", "aten::mul"] * ops, dtype=object),
        "start_ts": np.concatenate([op_cols["start_ts"], kernel_starts]),
        "end_ts": np.concatenate([op_cols["end_ts"], kernel_ends]),
        "duration_ns": np.concatenate([op_cols["end_ts"] - op_cols["start_ts"], kernel_ends - kernel_starts]),
        "trace_event_source": np.array(["framework"] * ops + ["neuron_hw"] * (2 * ops), dtype=object),
        "instance_id": np.array(["host"] * n, dtype=object),
        "process_id": np.zeros(n, dtype=np.int64),
        "thread_id": np.concatenate([np.ones(ops, np.int64), np.zeros(2 * ops, np.int64)]),
        "nc_idx": np.concatenate([np.zeros(ops, np.int64), np.zeros(ops, np.int64), np.ones(ops, np.int64)]),
        "correlation_id": np.concatenate([np.arange(ops), np.arange(ops), np.arange(ops)]).astype(np.int64) + 1,
        "stack_frame_id": pa.nulls(n, pa.int64()),
        "module_path": pa.nulls(n, pa.string()),
    }, schema=explorer_schema.TABLES["SystemProfileEvents"].schema)
    pq.write_table(table, directory / "SystemProfileEvents.parquet")
    summary = {f.name: None for f in explorer_schema.TABLES["Summary"].fields}
    pq.write_table(pa.Table.from_pylist([{**summary, "steps": 1, "kernels": 2 * ops}],
                                        explorer_schema.TABLES["Summary"].schema), directory / "Summary.parquet")
    return directory


def timed(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    from torch_neuronx.explorer.profile_data import ProfileData
    from torch_neuronx.explorer.server import serve
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t_write = timed(lambda: write_profile(root, args.events))
        holder = {}
        t_load = timed(lambda: holder.setdefault("data", ProfileData(root)))
        data = holder["data"]
        tl = data.system
        t_full = timed(lambda: tl.window(tl.start, tl.end, 1500), repeat=5)
        width = (tl.end - tl.start) // 1000
        windows = [(tl.start + k * width * 40, tl.start + k * width * 40 + width) for k in range(20)]
        t_pan = timed(lambda: [tl.window(a, b, 1500) for a, b in windows]) / len(windows)
        server = serve(root)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/api/timeline?start=%d&end=%d&px=1500"
        urllib.request.urlopen(url % windows[0], timeout=120).read()  # loads the profile once

        def http_pan() -> None:
            for a, b in windows:
                json.loads(urllib.request.urlopen(url % (a, b), timeout=60).read())
        t_http = timed(http_pan) / len(windows)
        server.shutdown()
    print(f"events: {3 * (args.events // 3):,}")
    print(f"write Parquet:                 {t_write:8.3f} s")
    print(f"load (ProfileData):            {t_load:8.3f} s   (goal: open in < 5 s)")
    print(f"whole-profile window (bins):   {t_full * 1e3:8.1f} ms")
    print(f"pan, 1/1000 window (events):   {t_pan * 1e3:8.1f} ms per window")
    print(f"pan over HTTP (JSON):          {t_http * 1e3:8.1f} ms per window")


if __name__ == "__main__":
    main()
