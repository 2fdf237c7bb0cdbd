"""NKI simulator throughput and estimated-vs-simulated time for the validation kernels.

For each kernel and size: the cost model's ESTIMATED device time (RunReport.estimated_seconds),
the simulator's measured wall time (median of --repeat runs), the slowdown (wall / estimate),
and the simulation throughput in simulated FLOPs and tensor elements (inputs + outputs) per
wall-clock second, with default rounding and with fp32_compute=True.

    python benchmarks/nki_simulation.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import ml_dtypes
import numpy as np


import nki  # noqa: E402
from nki.kernels import flash_attention_fwd, matmul, rmsnorm, softmax  # noqa: E402

BF16 = ml_dtypes.bfloat16


def workloads(quick: bool) -> list[tuple[str, Any, tuple]]:
    rng = np.random.default_rng(0)

    def randn(*shape: int, dtype: Any = np.float32) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)

    n = 512 if quick else 1024
    return [
        (f"matmul bf16 {n}^3", matmul, (randn(n, n, dtype=BF16), randn(n, n, dtype=BF16))),
        (f"matmul fp32 {n}^3", matmul, (randn(n, n), randn(n, n))),
        (f"softmax fp32 {n}x4096", softmax, (randn(n, 4096),)),
        (f"rmsnorm bf16 {n}x4096", rmsnorm, (randn(n, 4096, dtype=BF16), randn(4096, dtype=BF16))),
        (f"flash-attn causal bf16 seq {2 * n} d128", flash_attention_fwd,
         tuple(randn(2 * n, 128, dtype=BF16) for _ in range(3))),
    ]


def measure(kernel: Any, args: tuple, repeat: int, fp32_compute: bool) -> tuple[float, Any]:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = nki.simulate(kernel, fp32_compute=fp32_compute)(*args)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), (out, nki.simulator.last_report())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    print(f"{'workload':<34} {'instr':>6} {'est. device us':>15} {'sim wall ms':>12} "
          f"{'slowdown':>9} {'GFLOP/s sim':>12} {'Melem/s sim':>12} {'wall ms fp32c':>14}")
    for label, kernel, args in workloads(opts.quick):
        wall, (out, report) = measure(kernel, args, opts.repeat, False)
        wall_fast, _ = measure(kernel, args, opts.repeat, True)
        elements = sum(a.size for a in args if isinstance(a, np.ndarray)) + out.size
        print(f"{label:<34} {report.instruction_count:>6} {report.estimated_seconds * 1e6:>15.2f} "
              f"{wall * 1e3:>12.2f} {wall / report.estimated_seconds:>9.0f} "
              f"{report.flops / wall / 1e9:>12.2f} {elements / wall / 1e6:>12.2f} "
              f"{wall_fast * 1e3:>14.2f}")
    print("est. device us = cost-model ESTIMATE (busiest engine); sim wall = simulator wall time "
          "(median); fp32c = nki.simulate(..., fp32_compute=True)")


if __name__ == "__main__":
    main()
