"""`nki.benchmark`: the published benchmarking decorator (Neuron SDK 2.26 and earlier), filled from
the simulator's cost model. The latencies are ESTIMATES (`RunReport.estimated_seconds`: the busiest
engine's estimated time), not measurements: the cost model is deterministic, so the kernel runs
once and every one of the `iters` samples is that estimate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .jit import Gridded, Kernel, simulate
from .simulator import RunReport, last_report


@dataclass(frozen=True)
class LatencyResult:
    """Per-iteration latencies in microseconds (ESTIMATED by the cost model)."""

    samples_us: tuple[float, ...]
    estimated: bool = True

    def get_latency_percentile(self, percentile: int) -> float:
        """The `percentile` (0..100) latency in microseconds."""
        return float(np.percentile(self.samples_us, percentile))


@dataclass(frozen=True)
class BenchmarkResult:
    """`Benchmark.benchmark_result`: `nc_latency` as published, and the simulator's RunReport."""

    nc_latency: LatencyResult
    report: RunReport
    warmup: int
    iters: int


class Benchmark:
    """A kernel wrapped by `nki.benchmark`: call it with numpy arrays; it returns the kernel's outputs,
    prints the latency summary and keeps it in `benchmark_result`."""

    def __init__(self, kernel: Any, warmup: int = 10, iters: int = 100, **options: Any) -> None:
        self.kernel = kernel if isinstance(kernel, (Kernel, Gridded)) else Kernel(kernel)
        self.warmup, self.iters = int(warmup), int(iters)
        self.benchmark_result: BenchmarkResult | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        outputs = simulate(self.kernel)(*args, **kwargs)
        report = last_report()
        assert report is not None
        latency = LatencyResult((report.estimated_seconds * 1e6,) * max(self.iters, 1))
        self.benchmark_result = BenchmarkResult(latency, report, self.warmup, self.iters)
        p50, p99 = latency.get_latency_percentile(50), latency.get_latency_percentile(99)
        print(f"nki.benchmark '{report.kernel_name}': ESTIMATED latency (simulator cost model, not a "
              f"measurement) p50 = {p50:.3f} us, p99 = {p99:.3f} us over {self.iters} iterations "
              f"(warmup {self.warmup})")
        return outputs


def benchmark(kernel: Any = None, **kwargs: Any) -> Any:
    """``nki.benchmark(warmup=5, iters=20)(kernel)(*arrays)`` or ``@nki.benchmark``; then
    ``bench.benchmark_result.nc_latency.get_latency_percentile(99)`` (us, ESTIMATED). save_neff_name,
    save_trace_name and additional_compile_opt are accepted and have no effect."""
    if kernel is None:
        return lambda k: Benchmark(k, **kwargs)
    return Benchmark(kernel, **kwargs)
