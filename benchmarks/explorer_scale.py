"""How the Explorer copes with a big profile: a synthetic profile of N events (default one
million: framework operators on a host thread, one kernel per operator on each of 2 cores),
written with the profile's own schema, then timed side by side:

- loading it (ProfileData: Parquet -> NumPy rows, nesting depths),
- the whole-profile timeline window at 1,500 pixels (aggregated into per-pixel bins),
- 20 pans of a window holding 1/1000 of the profile (individual events),
- the same window queries answered by the HTTP server (JSON over loopback).

- opening the UI in headless Chromium (when Playwright and Chromium are installed) to the drawn
  system trace, and keyboard pans to the redrawn window;
- NeuronProfiler's export (trace and Parquet tables) of real recorded profiles of 10, 100 and
  1,000 steps of a small model step: time per event, which should stay flat as they grow.

    python benchmarks/explorer_scale.py [--events 1000000]
"""
from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import results
from torch_neuronx.profiling import explorer_schema


def write_profile(directory: Path, events: int) -> Path:
    """A profile of ``events`` SystemProfileEvents rows (a third framework ops, two thirds kernels)."""
    ops = events // 3
    op_starts = np.arange(ops, dtype=np.int64) * 10_000
    kernel_starts = np.concatenate([op_starts + 2_000, op_starts + 3_000])
    starts = np.concatenate([op_starts, kernel_starts])
    ends = starts + np.concatenate([np.full(ops, 6_000, np.int64), np.full(2 * ops, 5_000, np.int64)])
    n = 3 * ops
    table = pa.table({
        "id": np.arange(n, dtype=np.int64),
        "name": np.array(["aten::mm", "aten::add", "aten::mul"] * ops, dtype=object),
        "start_ts": starts, "end_ts": ends, "duration_ns": ends - starts,
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


def export_seconds(steps: int, root: Path) -> tuple[int, float]:
    """Records ``steps`` steps of a small model step on the device and times NeuronProfiler's
    export of them (the trace and every Parquet table): (events written, seconds)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler
    w = torch.randn(64, 64, device="neuron", requires_grad=True)
    x = torch.randn(32, 64, device="neuron")

    def step() -> None:
        (torch.tanh(x @ w) * 2).sum().backward()
    step()
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=str(root / f"steps{steps}"))
    exporter = NeuronProfiler(nc)
    took: list[float] = []

    def timed_export(prof: torch.profiler.profile) -> None:
        start = time.perf_counter()
        exporter.export_trace(prof)
        took.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=timed_export):
        for _ in range(steps):
            step()
        torch.neuron.synchronize()
    events = pq.read_metadata(exporter.last_output_dir / "SystemProfileEvents.parquet").num_rows
    return events, took[0]


def timed(fn, repeat: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def in_browser(url: str, pans: int = 10) -> tuple[float, float] | None:
    """Seconds from opening the UI to the drawn system trace (the profile loaded by the server on
    the first request), and per keyboard pan to the redrawn window; None without Playwright and
    Chromium."""
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if browser_path is None:
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox", "--disable-gpu",
                                    "--disable-background-networking", "--disable-component-update", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        start = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("body[data-state=ready]", timeout=120_000)
        page.click("nav button[data-tab=trace]")
        page.wait_for_selector("#trace-timeline[data-drawn]", timeout=120_000)
        opened = time.perf_counter() - start
        page.keyboard.press("w")  # zoom in a little, then pan
        page.wait_for_function("document.querySelector('#trace-timeline').dataset.drawn !== '1'")
        start = time.perf_counter()
        for _ in range(pans):
            before = page.get_attribute("#trace-timeline", "data-drawn")
            page.keyboard.press("d")
            page.wait_for_function(f"document.querySelector('#trace-timeline').dataset.drawn !== '{before}'")
        pan = (time.perf_counter() - start) / pans
        browser.close()
    return opened, pan


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    from torch_neuronx.explorer.profile_data import ProfileData
    from torch_neuronx.explorer.server import serve
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t_write = timed(lambda: write_profile(root, args.events))
        holder = {}
        t_load = timed(lambda: holder.setdefault("data", ProfileData(root)))
        tl = holder["data"].system
        t_full = timed(lambda: tl.window(tl.start, tl.end, 1500), repeat=5)
        width = (tl.end - tl.start) // 1000
        windows = [(tl.start + k * width * 40, tl.start + k * width * 40 + width) for k in range(20)]
        t_pan = timed(lambda: [tl.window(a, b, 1500) for a, b in windows]) / len(windows)
        server = serve(root)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        browser = in_browser(base)  # first: its open time includes the server loading the profile
        url = base + "/api/timeline?start=%d&end=%d&px=1500"

        def http_pan() -> None:
            for a, b in windows:
                json.loads(urllib.request.urlopen(url % (a, b), timeout=60).read())
        t_http = timed(http_pan) / len(windows)
        server.shutdown()
        exports = [export_seconds(steps, root) for steps in (10, 100, 1000)]
    events = 3 * (args.events // 3)
    rows = [["write the Parquet tables", f"{t_write:.2f} s"],
            ["load (ProfileData: Parquet to sorted rows, nesting)", f"{t_load:.2f} s"],
            ["whole-profile window, 1,500 px (per-pixel bins)", f"{t_full * 1e3:.1f} ms"],
            ["pan: a 1/1000 window (events), in Python", f"{t_pan * 1e3:.2f} ms"],
            ["pan: the same over HTTP (JSON)", f"{t_http * 1e3:.2f} ms"]]
    rows += [[f"export a recorded {steps}-step profile ({n:,} events)", f"{took:.2f} s ({took / n * 1e6:.0f} us/event)"]
             for steps, (n, took) in zip((10, 100, 1000), exports)]
    figures = {"load_s": f"{t_load:.1f} s", "pan_http_ms": f"{t_http * 1e3:.1f} ms",
               "export_1000_steps_s": f"{exports[-1][1]:.1f} s",
               "export_us_per_event": f"{exports[-1][1] / exports[-1][0] * 1e6:.0f} us"}
    if browser is not None:
        rows += [["Chromium: open the UI to the drawn system trace", f"{browser[0]:.2f} s"],
                 ["Chromium: one keyboard pan to the redrawn trace", f"{browser[1] * 1e3:.0f} ms"]]
        figures |= {"browser_open_s": f"{browser[0]:.1f} s", "browser_pan_ms": f"{browser[1] * 1e3:.0f} ms"}
    opened = browser[0] if browser is not None else t_load
    table = results.Table(f"Explorer over a synthetic profile of {events:,} events: open in "
                          f"{opened:.1f} s (target under 5 s: {'met' if opened < 5 else 'MISSED'})",
                          ["step", "time"], rows)
    print(results.render([table]))
    results.publish(__file__, [table], figures, args.out)


if __name__ == "__main__":
    main()
