"""Eager-mode overhead: small-op launch latency and a TinyGPT training step, neuron vs CPU.

(a) For each small-tensor op: warm up, then time N launches followed by one synchronize,
    R times; report the median time per op on the device and on CPU tensors, and the ratio.
(b) One TinyGPT training step (forward + backward + AdamW; batch 8, block 64, default
    config), synchronized at the end of every step: median over the measured steps.

(a) runs each side in three processes of its own, the sides taking turns (benchmarks/processes.py);
every figure is the median over its side's three. (b) runs in three pairs of new processes, one per
device, the two of a pair taking turns round by round (the machine's speed for two busy threads
drifts in phases: a round is compared with the other device's round next to it); the time is the
median over rounds, the ratio the median of the rounds' ratios.

Targets: small ops at most 5x the CPU time per op, the training step at most 1.25x.

    python benchmarks/eager_overhead.py                        # publishes to docs/benchmarks
    python benchmarks/eager_overhead.py --quick --out /tmp/b   # smoke test
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import processes
import results
from torch_neuronx.testing.tiny_gpt import training_step

SMALL_OP_TARGET = 5.0
TRAIN_STEP_TARGET = 1.25


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on ``device`` (``torch.neuron.synchronize()`` for neuron)."""
    torch.get_device_module(device).synchronize()


def small_ops(device: torch.device) -> dict[str, Callable[[], object]]:
    """Small-tensor operations, each a closure over inputs already on ``device``."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(64, generator=g).to(device) for _ in range(2))
    m = torch.randn(8, 8, generator=g).to(device)
    weight, bias = torch.ones(8, device=device), torch.zeros(8, device=device)
    index = torch.tensor([0, 3, 5, 7, 11, 13], device=device)
    acc = torch.zeros(64, device=device)
    return {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "relu": lambda: torch.relu(a),
        "matmul 8x8": lambda: m @ m,
        "sum": lambda: a.sum(),
        "softmax": lambda: torch.softmax(m, dim=-1),
        "layer_norm": lambda: F.layer_norm(m, (8,), weight, bias),
        "index_select": lambda: torch.index_select(a, 0, index),
        "cat": lambda: torch.cat([a, b]),
        "add_ (in-place)": lambda: acc.add_(b),
    }


def settle() -> None:
    """Pause so the OpenMP threads of what ran last stop spinning."""
    time.sleep(0.05)


def time_op(op: Callable[[], object], device: torch.device, launches: int, repeats: int) -> float:
    """Median seconds per launch of ``op`` (each repeat: ``launches`` launches + one sync)."""
    settle()
    for _ in range(max(launches // 10, 5)):
        op()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(launches):
            op()
        synchronize(device)
        samples.append((time.perf_counter() - start) / launches)
    return statistics.median(samples)


def train_rounds(device_name: str, warmup: int, steps: int) -> tuple[None, Callable[[], float]]:
    """A TinyGPT training step on one device in this process, warmed up, and a function that times
    a round: the median seconds of ``steps`` synchronized steps."""
    step = training_step(torch.device(device_name))
    for _ in range(warmup):
        step()

    def run_round() -> float:
        samples = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return None, run_round


def small_ops_per_launch(device_name: str, launches: int, repeats: int) -> dict[str, float]:
    """Seconds per launch of each small op on one device."""
    device = torch.device(device_name)
    return {name: time_op(op, device, launches, repeats) for name, op in small_ops(device).items()}


def small_ops_in_turns(turns: int, launches: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per device, :func:`small_ops_per_launch`'s figures as medians over ``turns`` processes."""
    runs = processes.in_turns(small_ops_per_launch, ("cpu", "neuron"), turns, launches, repeats)
    return {name: {op: statistics.median(r[op] for r in figures) for op in figures[0]}
            for name, figures in runs.items()}


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    args = parser.parse_args()
    launches, repeats = (50, 3) if args.quick else (200, 15)
    warmup_steps, train_steps = (2, 5) if args.quick else (5, 20)
    turns, rounds = (1, 2) if args.quick else (3, 5)
    medians = small_ops_in_turns(turns, launches, repeats)
    cpu_ops, device_ops = medians["cpu"], medians["neuron"]
    steps = processes.interleaved_in_turns(train_rounds, ("cpu", "neuron"), turns, rounds, warmup_steps, train_steps)
    print("training step ms per round, neuron / cpu:",
          [f"{n * 1e3:.1f}/{c * 1e3:.1f}" for n, c in zip(steps["neuron"], steps["cpu"])], flush=True)
    t_cpu_step, t_dev_step = statistics.median(steps["cpu"]), statistics.median(steps["neuron"])
    ratios = {name: t / cpu_ops[name] for name, t in device_ops.items()}
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios.values()))
    worst = max(ratios, key=ratios.get)
    step_ratio = processes.paired_ratio(steps["neuron"], steps["cpu"])
    ops = results.Table(
        f"(a) Small-tensor operators: median over {turns} processes per device of each one's median of "
        f"{repeats} x ({launches} launches + 1 synchronize), per launch",
        ["op", "neuron µs", "cpu µs", "neuron/cpu"],
        [[name, f"{t * 1e6:.1f}", f"{cpu_ops[name] * 1e6:.1f}", f"{ratios[name]:.2f}x"]
         for name, t in device_ops.items()]
        + [["**geometric mean**", "", "", f"{geomean:.2f}x"],
           [f"**worst** (target ≤ {SMALL_OP_TARGET:g}x: {results.verdict(ratios[worst], SMALL_OP_TARGET)})",
            "", "", f"{ratios[worst]:.2f}x ({worst})"]])
    step = results.Table(
        f"(b) TinyGPT training step (forward, backward, AdamW; batch 8 x 64): {turns} pairs of processes (one "
        f"per device) taking turns {rounds} rounds each, a round the median of {train_steps} steps (after "
        f"{warmup_steps} warm-up); times the medians over rounds, ratio the median of the rounds' ratios",
        ["neuron ms", "cpu ms", "neuron/cpu", f"target ≤ {TRAIN_STEP_TARGET:g}x"],
        [[f"{t_dev_step * 1e3:.2f}", f"{t_cpu_step * 1e3:.2f}", f"{step_ratio:.2f}x",
          results.verdict(step_ratio, TRAIN_STEP_TARGET)]])
    print(results.render([ops, step]))
    results.publish(__file__, [ops, step], {
        "small_op_geomean": f"{geomean:.2f}x", "small_op_worst": f"{ratios[worst]:.2f}x ({worst})",
        "train_step_ratio": f"{step_ratio:.2f}x"}, args.out)


if __name__ == "__main__":
    main()
