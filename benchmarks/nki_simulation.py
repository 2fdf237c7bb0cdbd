"""NKI simulator throughput and estimated-vs-simulated time for the validation kernels.

For each kernel and size: the cost model's ESTIMATED device time (RunReport.estimated_seconds),
the simulator's measured wall time (median of --repeat runs), the slowdown (wall / estimate),
and the simulation throughput in simulated FLOPs and tensor elements (inputs + outputs) per
wall-clock second, with default rounding and with fp32_compute=True.

    python benchmarks/nki_simulation.py [--repeat 3] [--quick] [--out DIR]
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
import results
from nki.kernels import flash_attention_fwd, matmul, rmsnorm, softmax

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


def numpy_matmul_gflops(n: int, repeat: int) -> float:
    """NumPy's own fp32 n^3 matmul rate on this machine: what the simulator's TensorE work runs on."""
    a, b = (np.random.default_rng(1).standard_normal((n, n)).astype(np.float32) for _ in range(2))
    a @ b
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        a @ b
        walls.append(time.perf_counter() - start)
    return 2 * n ** 3 / statistics.median(walls) / 1e9


@nki.jit
def _bookkeeping(x: Any, n: int) -> Any:
    """2n instructions on a one-element tile: what an instruction costs besides its NumPy work."""
    t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in range(n):
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        nisa.activation(t, nl.exp, t, scale=0.0)
    return x


def bookkeeping_seconds(repeat: int, n: int = 1000) -> float:
    """Seconds per instruction of the simulator's bookkeeping (rules, records, dispatch)."""
    wall, _ = measure(_bookkeeping, (np.zeros((1, 1), np.float32), n), repeat, False)
    return wall / (2 * n + 1)


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    numpy_gflops = numpy_matmul_gflops(1024, opts.repeat)
    per_instruction = bookkeeping_seconds(opts.repeat)
    rows = []
    for label, kernel, args in workloads(opts.quick):
        wall, (out, report) = measure(kernel, args, opts.repeat, False)
        wall_fast, _ = measure(kernel, args, opts.repeat, True)
        elements = sum(a.size for a in args if isinstance(a, np.ndarray)) + out.size
        gflops = report.flops / wall / 1e9
        rows.append([label, str(report.instruction_count), f"{report.estimated_seconds * 1e6:.1f}",
                     f"{wall * 1e3:.1f}", f"{wall / report.estimated_seconds:.0f}",
                     f"{wall / report.instruction_count * 1e6:.1f}", f"{gflops:.2f}",
                     f"{100 * gflops / numpy_gflops:.0f}%", f"{elements / wall / 1e6:.0f}", f"{wall_fast * 1e3:.1f}",
                     f"{100 * min(1.0, report.instruction_count * per_instruction / wall):.0f}%"])
    table = results.Table(
        f"Simulator wall time (median of {opts.repeat}) next to the cost model's ESTIMATED device "
        f"time (busiest engine); NumPy's own fp32 1024^3 matmul runs at {numpy_gflops:.0f} GFLOP/s on this "
        "machine; fp32c = nki.simulate(..., fp32_compute=True); bookkeeping = instructions x the "
        f"per-instruction cost of a one-element kernel ({per_instruction * 1e6:.1f} µs), the rest is NumPy work",
        ["workload", "instructions", "estimated µs", "simulator wall ms", "wall / estimate", "µs / instruction",
         "simulated GFLOP/s", "of NumPy matmul", "Melem/s", "wall ms fp32c", "bookkeeping"], rows)
    print(results.render([table]))
    results.publish(__file__, [table], {"numpy_matmul_gflops": f"{numpy_gflops:.0f}",
                                              "bookkeeping_us": f"{per_instruction * 1e6:.1f}"}, opts.out)


if __name__ == "__main__":
    main()
