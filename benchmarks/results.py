"""Published benchmark results, and the pages that show them.

Every script in benchmarks/ ends with :func:`publish`: its tables as Markdown and JSON in
docs/benchmarks/<script>.{md,json}, with the date, machine, torch version and git commit, and the
figures other pages quote. Pages never hold typed copies of them:

* docs/benchmarks.md includes each script's Markdown between ``<!-- BEGIN RESULTS: <script> -->``
  and ``<!-- END RESULTS -->``;
* a figure quoted in prose is ``<!--fig:<json path>#<key>-->value<!--/fig-->`` (README.md, docs/*.md;
  the conformance sweep's docs/operator-coverage.json works the same way).

``python benchmarks/results.py`` rewrites both from the JSON files (``publish`` does it after
each run); ``--check`` lists stale pages instead (tests/test_docs_figures.py runs it).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "docs", "benchmarks")
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
SECTION = re.compile(r"(<!-- BEGIN RESULTS: (\w+) -->\n).*?(<!-- END RESULTS -->)", re.S)
FIGURE = re.compile(r"(<!--fig:([^#>]+)#(\w+)-->).*?(<!--/fig-->)", re.S)
NOT_MEASURED = "not measured yet"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


def parser(doc: str) -> argparse.ArgumentParser:
    """The script's argument parser, with ``--out`` (a scratch directory keeps a trial run out of
    the published results)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--out", default=RESULTS_DIR,
                   help="directory for <script>.md/.json (default docs/benchmarks, which also updates the docs)")
    return p


def median_ms(call: Callable[[], object], device: Any, repeats: int) -> float:
    """Median wall time in ms of a synchronized ``call()`` on ``device``, after three warm-up calls
    (they build kernels)."""
    import torch  # here: refreshing the pages (this file run alone) needs no torch
    sync = torch.get_device_module(device).synchronize
    times = []
    for i in range(repeats + 3):
        start = time.perf_counter()
        call()
        sync()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def verdict(value: float, target: float) -> str:
    """Whether a measured ratio or time is within its target (at most ``target``)."""
    return "meets target" if value <= target else "MISSES target"


def render(tables: list[Table]) -> str:
    """The tables as Markdown (also what the scripts print)."""
    lines = []
    for t in tables:
        lines += [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in t.rows] + [""]
    return "\n".join(lines)


def _markdown(data: dict, tables: list[Table]) -> str:
    commit = data["commit"][:12] + ("+dirty" if data["commit"].endswith("+dirty") else "")
    return (f"Measured {data['date']} on {data['cpu']} ({data['cores']} cores), torch {data['torch']}, "
            f"commit `{commit}`: `{data['command']}`.\n\n" + render(tables))


def publish(script: str, tables: list[Table], figures: dict[str, str], out_dir: str) -> None:
    """Write ``<out_dir>/<script>.json`` and ``.md``; into docs/benchmarks, also refresh the pages."""
    from torch_neuronx.testing.provenance import provenance
    name = os.path.splitext(os.path.basename(script))[0]
    data = {**provenance(), "command": " ".join(["python", f"benchmarks/{name}.py", *sys.argv[1:]]),
            "figures": figures, "tables": [asdict(t) for t in tables]}
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, name)
    with open(base + ".json", "w") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(_markdown(data, tables))
    print(f"wrote {base}.md and {base}.json")
    if os.path.realpath(out_dir) == os.path.realpath(RESULTS_DIR):
        refresh()


def _include(match: re.Match) -> str:
    path = os.path.join(RESULTS_DIR, match[2] + ".md")
    body = (open(path).read() if os.path.exists(path)
            else f"Not measured yet: run `python benchmarks/{match[2]}.py`.\n\n")
    return match[1] + body + match[3]


def _figure(match: re.Match) -> str:
    path = os.path.join(ROOT, match[2])
    if not os.path.exists(path):
        return match[1] + NOT_MEASURED + match[4]
    with open(path) as f:
        figures = json.load(f)["figures"]
    if match[3] not in figures:
        raise KeyError(f"{match[0]!r}: {match[2]} has no figure {match[3]!r} (it has {sorted(figures)})")
    return match[1] + figures[match[3]] + match[4]


def refresh(check: bool = False) -> list[str]:
    """Rewrite every page's result sections and figures from the JSON files (with ``check``, only
    report them); returns the pages that were (or would be) changed."""
    stale = []
    for page in PAGES:
        with open(page) as f:
            text = f.read()
        new = FIGURE.sub(_figure, SECTION.sub(_include, text))
        if new != text:
            stale.append(os.path.relpath(page, ROOT))
            if not check:
                with open(page, "w") as f:
                    f.write(new)
    return stale


def main() -> int:
    p = argparse.ArgumentParser(description="Refresh the figures the docs quote from the results.")
    p.add_argument("--check", action="store_true", help="list stale pages, exit 1 if any")
    check = p.parse_args().check
    stale = refresh(check)
    for page in stale:
        print(("stale: " if check else "updated: ") + page)
    return 1 if stale and check else 0


if __name__ == "__main__":
    sys.exit(main())
