"""``python -m torch_neuronx.profiling.report <dir>``: a readable report of an exported profile.

Prints the hotspots by measured device time, the CPU fallbacks with what they cost, and the
estimated chip step time and MFU; writes ``report.png`` (time by operator family and by engine)
and ``report.html`` (the same, for a browser) next to the tables.
"""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import pyarrow.parquet as pq

from nki.simulator.cost_model import ENGINES

from .explorer_schema import SUMMARY_ENGINES

ROWS = 15


def find_profile(directory: Path) -> Path:
    """The newest exported profile at or under ``directory``."""
    found = sorted(p.parent for p in Path(directory).rglob("Summary.parquet"))
    if not found:
        raise FileNotFoundError(f"no exported profile (Summary.parquet) under {directory}: pass the "
                                "profile_output_dir of a NeuronConfig, or one of its run directories")
    return max(found, key=lambda p: p.stat().st_mtime)


def _family(op: dict) -> str:
    if op["execution"] != "native":
        return op["execution"]
    return {"TensorE": "matmul (TensorE)", "VectorE": "elementwise/reduction (VectorE)",
            "DMA": "copies (DMA)"}.get(
        op["estimated_engine"], "unestimated")


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


MISSING_MATPLOTLIB = ("not written: matplotlib is not installed "
                      "(pip install 'torch-neuronx-sim[report]' adds it)")


def _chart(ops: list[dict], summary: dict, path: Path) -> str:
    """Write the chart to ``path``; return where it is, or why it was not written."""
    try:
        import matplotlib
    except ImportError:
        return MISSING_MATPLOTLIB
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    families: dict[str, float] = {}
    for op in ops:
        families[_family(op)] = families.get(_family(op), 0.0) + op["device_time_us"] + op["host_fallback_time_us"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.barh(list(families), list(families.values()), color="tab:blue")
    left.set_title("Measured time by operator family (simulator, us)")
    engines = [summary[f"{SUMMARY_ENGINES[e]}_active_time"] * 1e6 for e in ENGINES]
    right.barh(list(ENGINES), engines, color="tab:orange")
    right.set_title(f"ESTIMATED active time by engine ({summary['target']}, us)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)


def build(profile_dir: Path) -> str:
    """Write report.png and report.html into ``profile_dir``; return the text report."""
    ops = pq.read_table(profile_dir / "FrameworkOp.parquet").to_pylist()
    summary = pq.read_table(profile_dir / "Summary.parquet").to_pylist()[0]
    meta = pq.read_table(profile_dir / "Metadata.parquet").to_pylist()[0]
    summary["target"] = meta["target_generation"]
    hot = sorted(ops, key=lambda o: -o["device_time_us"])[:ROWS]
    fallbacks = [o for o in ops if o["is_fallback"]]
    header = ("operator", "execution", "calls", "device us (measured)", "est. chip us", "engine", "bound")
    hot_rows = [(o["op_name"], o["execution"], str(o["calls"]), _fmt(o["device_time_us"]),
                 _fmt(o["estimated_chip_time_us"]), o["estimated_engine"] or "", o["estimated_bound"] or "")
                for o in hot]
    fb_header = ("operator", "calls", "host us (measured)", "est. cost us (host + transfer)")
    fb_rows = [(o["op_name"], str(o["calls"]), _fmt(o["host_fallback_time_us"]), _fmt(o["estimated_chip_time_us"]))
               for o in fallbacks]
    mfu = summary["mfu_estimated_percent"]
    headline = [
        f"Simulated profile ({meta['chip_generation']}); estimates for {meta['target_generation']}",
        f"steps: {summary['steps']}   measured device time: {_fmt(summary['device_time_us'])} us   "
        f"measured CPU-fallback time: {_fmt(summary['host_fallback_time_us'])} us",
        f"ESTIMATED chip step time: {_fmt(summary['estimated_step_time_us'])} us   "
        f"ESTIMATED MFU: {'n/a' if mfu is None else f'{mfu:.2f}%'}   "
        f"operators without an estimate: {summary['unestimated_ops']}",
    ]
    chart = _chart(ops, summary, profile_dir / "report.png")
    (profile_dir / "report.html").write_text(_html(headline, header, hot_rows, fb_header, fb_rows))

    def table(head: tuple, rows: list[tuple]) -> list[str]:
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        return [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head, *rows]]
    lines = [*headline, "", "Hotspots by measured device time:", *table(header, hot_rows), "",
             f"CPU fallbacks ({len(fallbacks)}):", *(table(fb_header, fb_rows) if fb_rows else ["none"]), "",
             f"chart: {chart}", f"html: {profile_dir / 'report.html'}"]
    return "\n".join(lines)


def _html(headline: list[str], header: tuple, rows: list[tuple], fb_header: tuple, fb_rows: list[tuple]) -> str:
    def table(head: tuple, body: list[tuple], table_id: str) -> str:
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
        return f'<table id="{table_id}"><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table>'
    fallback_html = table(fb_header, fb_rows, "fallbacks") if fb_rows else '<p id="fallbacks">none</p>'
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Neuron profile report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:2px 8px;text-align:left}}</style></head>
<body><h1>Neuron profile report</h1>
{''.join(f'<p class="headline">{html.escape(line)}</p>' for line in headline)}
<h2>Hotspots by measured device time</h2>{table(header, rows, "hotspots")}
<h2>CPU fallbacks</h2>{fallback_html}
<h2>Time by operator family and engine</h2><img id="chart" src="report.png" alt="time by operator family and engine"
 onload="document.body.dataset.chart='loaded'" onerror="document.body.dataset.chart='missing'">
<p>Measured times come from the simulated cores; every estimate is a cost-model figure for the
target chip, not a measurement.</p></body></html>
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_neuronx.profiling.report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="profile_output_dir, or one exported profile directory")
    args = parser.parse_args(argv)
    try:
        print(build(find_profile(args.directory)))
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
