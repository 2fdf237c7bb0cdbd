"""``neuron-top``: a live view of the processes using the simulated cores on this machine — per
core its memory and kernel rate, per process its cores and memory — refreshed every interval
(read from the files the processes publish; see torch_neuronx/runtime/activity.py).

    neuron-top                      refresh until interrupted
    neuron-top --once --json        one snapshot, machine-readable
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..runtime import activity
from .machine import GiB, cores

CLEAR = "\x1b[H\x1b[2J"


def sample() -> dict[str, Any]:
    return {"time": time.time(), "cores": cores(), "processes": activity.read_all()}


def rates(before: dict[str, Any] | None, now: dict[str, Any]) -> dict[int, float]:
    """Kernels per second of each core between two samples (0 on the first)."""
    if before is None:
        return {row["core"]: 0.0 for row in now["cores"]}
    elapsed = max(now["time"] - before["time"], 1e-9)
    previous = {row["core"]: row["kernels"] for row in before["cores"]}
    return {row["core"]: max(row["kernels"] - previous.get(row["core"], 0), 0) / elapsed for row in now["cores"]}


def render(now: dict[str, Any], per_second: dict[int, float]) -> str:
    used = [row for row in now["cores"] if row["pids"]]
    lines = [f"neuron-top  {time.strftime('%H:%M:%S', time.localtime(now['time']))}  "
             f"{len(now['processes'])} process(es), {len(used)} of {len(now['cores'])} cores in use", "",
             f"{'CORE':>4}  {'MEMORY':<28} {'KERNELS/S':>10} {'QUEUED':>7}"]
    for row in used:
        share = row["reserved"] / row["capacity"] if row["capacity"] else 0.0
        bar = "#" * round(share * 10)
        lines.append(f"{row['core']:>4}  [{bar:<10}] {row['reserved'] / GiB:>6.2f} GiB {share:>5.1%}"
                     f" {per_second[row['core']]:>10.0f} {row['pending']:>7}")
    lines += ["", f"{'PID':>7}  {'CORES':<8} {'ALLOCATED':>10} {'PEAK':>10}  COMMAND"]
    for record in now["processes"]:
        allocated = sum(c["allocated"] for c in record["cores"]) / GiB
        peak = sum(c["peak"] for c in record["cores"]) / GiB
        where = ",".join(str(c["core"]) for c in record["cores"])
        lines.append(f"{record['pid']:>7}  {where:<8} {allocated:>6.2f} GiB {peak:>6.2f} GiB  {record['command'][:60]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="neuron-top", description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    parser.add_argument("--iterations", type=int, default=0, help="stop after this many refreshes (0: never)")
    parser.add_argument("--once", action="store_true", help="one snapshot (same as --iterations 1)")
    parser.add_argument("--json", action="store_true", help="print each snapshot as one line of JSON")
    args = parser.parse_args(argv)
    iterations = 1 if args.once else args.iterations
    before, shown = None, 0
    try:
        while True:
            now = sample()
            per_second = rates(before, now)
            if args.json:
                print(json.dumps({**now, "kernels_per_second": per_second}), flush=True)
            else:
                print(CLEAR + render(now, per_second), flush=True)
            before, shown = now, shown + 1
            if iterations and shown >= iterations:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
