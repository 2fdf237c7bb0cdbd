"""Profiling overhead: a TinyGPT training step with and without torch.profiler recording.

Measures, side by side in one process, the median synchronized training step (forward,
backward, AdamW; batch 8 x 64 tokens, default TinyGPT config) plain and inside
``torch.profiler.profile(activities=[CPU, PrivateUse1])`` with a ``NeuronConfig`` (default modes
DEVICE + RUNTIME, no modes, and every mode including the CPU/memory samplers). Rounds
alternate plain and profiled steps so that machine noise hits both alike. The same is measured
on CPU tensors for reference: that ratio is PyTorch's own operator recording, which the device
side pays too. The export (trace + Parquet tables) happens after the session and is timed
separately. Target: profiled/plain at most 1.10 on the device.

    python benchmarks/profiling_overhead.py [--quick] [--out DIR]
"""
from __future__ import annotations

import statistics
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

import results
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
from torch_neuronx.testing.tiny_gpt import training_step

TARGET = 1.10


def timed(step, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return samples


def measure(device: torch.device, activities: list[ProfilerActivity], modes: list[ProfileMode],
            rounds: int, steps: int, out_dir: str) -> tuple[float, float, float]:
    """Median plain step, median profiled step, and the seconds one export took."""
    step = training_step(device)
    timed(step, 5)  # warm-up: first launches build the kernels
    plain, profiled, export = [], [], 0.0
    for _ in range(rounds):
        plain += timed(step, steps)
        nc = NeuronConfig(modes=modes, profile_output_dir=out_dir)
        with profile(activities=activities, experimental_config=nc) as prof:
            profiled += timed(step, steps)
        start = time.perf_counter()
        NeuronProfiler(nc).export_trace(prof)
        export = time.perf_counter() - start
    return statistics.median(plain), statistics.median(profiled), export


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    args = parser.parse_args()
    rounds, steps = (2, 3) if args.quick else (7, 8)
    cpu, neuron = ProfilerActivity.CPU, ProfilerActivity.PrivateUse1
    default = [ProfileMode.DEVICE, ProfileMode.RUNTIME]
    # "CPU only" isolates PyTorch's operator recording from the device activity.
    cases = [("neuron", "CPU+NEURON", default), ("neuron", "CPU+NEURON", []),
             ("neuron", "CPU+NEURON", list(ProfileMode)), ("neuron", "CPU only", default), ("cpu", "CPU", default)]
    rows, ratios = [], []
    with tempfile.TemporaryDirectory() as out_dir:
        for name, label, modes in cases:
            activities = [cpu, neuron] if label == "CPU+NEURON" else [cpu]
            plain, prof, export = measure(torch.device(name), activities, modes, rounds, steps, out_dir)
            ratios.append(prof / plain)
            rows.append([name, label, ", ".join(m.name for m in modes) or "none", f"{plain * 1e3:.2f}",
                         f"{prof * 1e3:.2f}", f"{prof / plain:.2f}", f"{export:.2f}"])
    overhead = f"{100 * (ratios[0] - 1):+.1f}%"
    table = results.Table(
        f"TinyGPT training step, median of {rounds} rounds x {steps} steps per side; default-mode "
        f"overhead on neuron {overhead} (target under {100 * (TARGET - 1):.0f}%: "
        f"{'met' if ratios[0] <= TARGET else 'MISSED'})",
        ["device", "activities", "modes", "plain ms", "profiled ms", "ratio", "export s"], rows)
    print(results.render([table]))
    results.publish(__file__, [table], {"default_overhead": overhead}, args.out)


if __name__ == "__main__":
    main()
