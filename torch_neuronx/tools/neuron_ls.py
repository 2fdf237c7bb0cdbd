"""``neuron-ls``: the simulated devices — generation, logical cores, HBM capacity and use per core.

    neuron-ls            a table
    neuron-ls --json     the same rows as JSON
"""
from __future__ import annotations

import argparse
import json
import sys

from .machine import GiB, cores


def table(rows: list[dict]) -> str:
    lines = [f"{'CORE':>4}  {'CHIP':>4}  {'GEN':<5} {'PHYS':>4}  {'HBM USED':>10} / {'CAPACITY':<10} {'PROCESSES'}"]
    for r in rows:
        pids = ",".join(map(str, r["pids"])) or "-"
        lines.append(f"{r['core']:>4}  {r['chip']:>4}  {r['generation']:<5} {r['physical_cores']:>4}  "
                     f"{r['reserved'] / GiB:>6.2f} GiB / {r['capacity'] / GiB:<6.1f} GiB {pids}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="neuron-ls", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = cores()
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
