"""Command line: ``python -m torch_neuronx.testing.conformance [options]``."""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_neuronx.testing.conformance",
                                description="Run PyTorch's OpInfo samples on neuron and compare with the CPU.")
    p.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: all nine)")
    p.add_argument("--max-samples", type=int, default=None, help="samples per operator and dtype")
    p.add_argument("--workers", type=int, default=1, help="spawned worker processes")
    p.add_argument("--subset", choices=("fast", "full"), default=None,
                   help="fast: the fixed CI subset (~50 ops, 4 dtypes, 3 samples)")
    p.add_argument("--no-grad", action="store_true", help="skip the gradient comparison")
    p.add_argument("--expectations", default=None, help="expectations JSON (default: the packaged one)")
    p.add_argument("--out", default=None, help="directory for results.csv and summary.md")
    p.add_argument("--summary", default=None, help="write the Markdown summary here (docs/operator-coverage.md: "
                   "its generated section) and its figures as JSON next to it")
    p.add_argument("--chart", default=None, help="write the PNG chart here (needs matplotlib)")
    p.add_argument("--from-csv", default=None, help="regenerate summary/chart from a results CSV")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 on unexpected mismatch/error or xpass")
    a = p.parse_args(argv)

    from . import report, runner
    t0 = time.time()
    if a.from_csv:
        rows = report.read_csv(a.from_csv)
        elapsed = None
    else:
        def progress(i, n, key, rows, secs):
            if a.quiet:
                return
            c = {}
            for r in rows:
                c[r["outcome"]] = c.get(r["outcome"], 0) + 1
            bad = "  <-- " + ", ".join(f"{k}={v}" for k, v in sorted(c.items()) if k in ("mismatch", "error"))
            print(f"[{i}/{n}] {key}: {dict(sorted(c.items()))} {secs:.1f}s"
                  + (bad if any(k in c for k in ("mismatch", "error")) else ""), flush=True)

        rows = runner.run(
            ops=a.ops.split(",") if a.ops else None,
            dtypes=a.dtypes.split(",") if a.dtypes else None,
            max_samples=a.max_samples, workers=a.workers, subset=a.subset,
            grad=not a.no_grad, expectations_path=a.expectations, progress=progress)
        elapsed = time.time() - t0
    command = "python -m torch_neuronx.testing.conformance " + " ".join(
        x for x in (argv if argv is not None else sys.argv[1:]))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        if not a.from_csv:
            report.write_csv(rows, os.path.join(a.out, "results.csv"))
        report.write_markdown(rows, os.path.join(a.out, "summary.md"), command=command, seconds=elapsed)
    s = None
    if a.summary:
        s = report.write_markdown(rows, a.summary, command=command, seconds=elapsed)
        report.write_figures(rows, os.path.splitext(a.summary)[0] + ".json", command, elapsed)
    if a.chart:
        report.write_chart(rows, a.chart)
    s = s or report.summarize(rows)
    o = s["outcomes"]
    print(f"{s['rows']} samples: " + ", ".join(f"{k}={o.get(k, 0)}" for k in
                                               ("pass", "mismatch", "error", "xfail", "xpass", "skipped")))
    print(report.figures(s)["headline"] + (f" ({elapsed:.0f}s)" if elapsed is not None else ""))
    if o.get("xpass"):
        print(f"XPASS: {o['xpass']} samples marked xfail now pass: remove their expectations", file=sys.stderr)
    if a.strict and s["unexpected"]:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
