"""The Markdown summary of the lowering table (docs/operator-coverage.md) and the README's count.

    python tools/lowering_report.py           # print the summary
    python tools/lowering_report.py --write   # rewrite both from this tree's table
    python tools/lowering_report.py --check   # exit 1 if either is stale (tests/test_docs_figures.py)
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this tree's table, also when run as tools/lowering_report.py

from torch_neuronx.ops.lowering_table import BOOL_INDEX_SYNC_OPS, LOWERINGS  # noqa: E402

COVERAGE = os.path.join(ROOT, "docs", "operator-coverage.md")
README = os.path.join(ROOT, "README.md")
SECTION = re.compile(r"(<!-- BEGIN GENERATED: lowering table -->\n).*?(<!-- END GENERATED: lowering table -->)", re.S)
README_COUNT = re.compile(r"(lowering table \()[\d,]+( overloads\))")


def summary() -> str:
    families = Counter(entry.family for entry in LOWERINGS)
    lines = [f"{len(LOWERINGS)} operator overloads have a device kernel.", "",
             "| family | overloads |", "|---|---|"]
    lines += [f"| {family} | {count} |" for family, count in sorted(families.items(), key=lambda kv: -kv[1])]
    sync = sorted(entry.op for entry in LOWERINGS if entry.mode == "sync" and entry.family != "linalg")
    lines += ["", f"Always synchronous (data-dependent output shape or host result): {', '.join(sync)}.", "",
              "The linalg family is synchronous too: LAPACK kernels raise on data (not positive-definite, "
              "no convergence), and a synchronous kernel raises at the call, as on the CPU.", "",
              f"Synchronous when indexing with a boolean mask: {', '.join(sorted(BOOL_INDEX_SYNC_OPS))}."]
    return "\n".join(lines) + "\n"


def write(check: bool = False) -> list[str]:
    """Rewrite the summary section and the README's count (with ``check``, only compare);
    returns the files that were (or would be) changed."""
    stale = []
    for path, pattern, repl in ((COVERAGE, SECTION, lambda m: m[1] + summary() + m[2]),
                                (README, README_COUNT, lambda m: f"{m[1]}{len(LOWERINGS):,}{m[2]}")):
        with open(path) as f:
            text = f.read()
        new, count = pattern.subn(repl, text)
        if count != 1:
            raise ValueError(f"{path}: expected one match of {pattern.pattern!r}, found {count}")
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                with open(path, "w") as f:
                    f.write(new)
    return stale


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    a = p.parse_args()
    if not (a.write or a.check):
        print(summary(), end="")
        return 0
    stale = write(check=a.check)
    for path in stale:
        print(("stale: " if a.check else "updated: ") + path)
    return 1 if stale and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
