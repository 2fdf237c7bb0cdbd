"""torch.compile(backend="neuron") against neuron eager, CPU eager and CPU Inductor, side by side.

Median synchronized training-step time (forward, backward, AdamW) of TinyGPT and of a stack of
elementwise/normalization layers where fusion matters, after warm-up (compilation excluded).
Then cold against warm start: two fresh processes run the first compiled TinyGPT step on one
executable cache and one Inductor cache directory, both empty for the first.

    python benchmarks/compile_speed.py [--processes 3] [--out DIR]
    python benchmarks/compile_speed.py --rounds 1 --burst 2 --processes 1 --out /tmp/b   # smoke test
"""
from __future__ import annotations

import functools
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import torch
from torch import nn

import results
import torch_neuronx
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches


class NormStack(nn.Module):
    """Elementwise-heavy blocks: many small ops per layer, where fusing them pays."""

    def __init__(self, width: int = 256, depth: int = 6) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))
        self.scale = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for norm in self.layers:
            x = x + torch.tanh(norm(x) * self.scale) * torch.sigmoid(x) - 0.1 * x.square()
        return x, (x - y).square().mean()


def gpt_case() -> tuple[Callable[[], nn.Module], tuple[torch.Tensor, torch.Tensor]]:
    config = GPTConfig()
    return (lambda: TinyGPT(config)), make_batches(1, 8, config.block_size, config.vocab_size, seed=0)[0]


def stack_case(rows: int = 64, width: int = 256) -> tuple[Callable[[], nn.Module], tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return (functools.partial(NormStack, width),
            (torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)))


class Variant:
    """One model, optimizer and batch on a device; with a backend, the model and (unless
    ``eager_optimizer``) the optimizer step are compiled, as PyTorch recommends for compiled
    training. ``step`` runs one synchronized training step."""

    def __init__(self, model_fn: Callable[[], nn.Module], batch: tuple[torch.Tensor, torch.Tensor],
                 device: str, backend: str | None, eager_optimizer: bool = False) -> None:
        torch.manual_seed(0)
        model = model_fn().to(device)
        self.model = torch.compile(model, backend=backend) if backend else model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        compile_step = backend and not eager_optimizer
        self.optimizer_step = (torch.compile(self.optimizer.step, backend=backend) if compile_step
                               else self.optimizer.step)
        self.x, self.y = (t.to(device) for t in batch)

    def step(self) -> float:
        start = time.perf_counter()
        self.optimizer.zero_grad()
        loss = self.model(self.x, self.y)[1]
        loss.backward()
        self.optimizer_step()
        loss.item()
        return time.perf_counter() - start


CASES = {"TinyGPT": gpt_case, "NormStack": stack_case,
         "NormStack-large": functools.partial(stack_case, 512, 1024)}


def _serve(conn: Connection, case: str, device: str, backend: str | None, eager_optimizer: bool) -> None:
    """A variant in a process of its own: per request, that many training steps back to back
    (their times), until None."""
    run = Variant(*CASES[case](), device, backend, eager_optimizer)
    while (count := conn.recv()) is not None:
        conn.send([run.step() for _ in range(count)])


def step_times(case: str, variants: list[tuple[str, str, str | None]], rounds: int, burst: int,
               eager_optimizer: bool = False, processes: int = 2) -> dict[str, float]:
    """Per variant: the median step seconds, after a first (compiling) step. Each variant runs in processes of
    its own, as a user's program would: OpenMP keeps one thread team per thread that ran a
    parallel op, and teams of several variants in one process would slow each other (libgomp
    shortens its barrier spinning when a process has more OpenMP threads than cores). Each
    variant runs in ``processes`` processes, whose steps are pooled: on this shared machine two
    processes of the very same variant can differ by 40%. The processes take turns, ``burst``
    steps back to back as in a training loop, so load from elsewhere falls on all of them alike;
    the median is over every step but the first of each turn (caches and threads are cold after
    another process ran)."""
    context = multiprocessing.get_context("spawn")
    pipes = []
    for _ in range(processes):
        for name, device, backend in variants:
            parent, child = context.Pipe()
            context.Process(target=_serve, args=(child, case, device, backend, eager_optimizer),
                            daemon=True).start()
            pipes.append((name, parent))
    for _, pipe in pipes:
        pipe.send(1)
        pipe.recv()  # the first (compiling) step
    times: dict[str, list[float]] = {name: [] for name, *_ in variants}
    for _ in range(rounds):
        for name, pipe in pipes:
            time.sleep(0.01)  # let the previous process's OpenMP threads stop spinning
            pipe.send(burst)
            times[name] += pipe.recv()[1:]
    for _, pipe in pipes:
        pipe.send(None)
    return {name: statistics.median(samples) for name, samples in times.items()}


# A fresh process: the first compiled TinyGPT training step, timed from before the model exists.
FIRST_STEP = """
import json, time, torch, torch_neuronx
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches
start = time.perf_counter()
torch.manual_seed(0)
config = GPTConfig()
model = torch.compile(TinyGPT(config).to("neuron"), backend="neuron")
x, y = (t.to("neuron") for t in make_batches(1, 8, config.block_size, config.vocab_size, seed=0)[0])
loss = model(x, y)[1]
loss.backward()
loss.item()
print(json.dumps({"first_step_s": time.perf_counter() - start, **torch_neuronx.get_dynamo_metrics()}))
"""


def start_times() -> dict[str, dict]:
    """Cold (empty caches) and warm start of the compiled TinyGPT step, each in a fresh process.
    Both the executable cache and Inductor's (kernels, AOTAutograd entries) start empty."""
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(torch_neuronx.__file__)))
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(cache_dir, "executables"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"), "PYTHONPATH": repo_root}
        env.pop("TORCH_NEURONX_DISABLE_NEFF_CACHE", None)
        runs = {}
        for name in ("cold", "warm"):
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", FIRST_STEP], env=env, check=True,
                                 capture_output=True, text=True).stdout
            runs[name] = {**json.loads(out.strip().splitlines()[-1]), "process_s": time.perf_counter() - start}
        return runs


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="turns each process takes")
    parser.add_argument("--burst", type=int, default=10, help="steps per turn")
    parser.add_argument("--processes", type=int, default=2, help="processes per variant")
    parser.add_argument("--eager-optimizer", action="store_true",
                        help="compiled variants compile the model only, not the optimizer step")
    args = parser.parse_args()
    runs = start_times()
    cold_over_warm = runs["cold"]["first_step_s"] / runs["warm"]["first_step_s"]
    start = results.Table(
        "Cold against warm start: the first compiled TinyGPT training step in a fresh process, timed "
        f"from before the model is built; cold / warm first step {cold_over_warm:.1f}x (target ≥ 5x)",
        ["run", "first step s", "whole process s", "executables compiled", "cache hits"],
        [[name, f"{r['first_step_s']:.2f}", f"{r['process_s']:.2f}", str(r["executables_compiled"]),
          str(r["cache_hits"])] for name, r in runs.items()])
    variants = [("neuron compiled", "neuron", "neuron"), ("neuron eager", "neuron", None),
                ("cpu eager", "cpu", None), ("cpu inductor", "cpu", "inductor")]
    rows, figures = [], {"cold_over_warm": f"{cold_over_warm:.1f}x"}
    for case in CASES:
        medians = step_times(case, variants, args.rounds, args.burst, args.eager_optimizer, args.processes)
        vs_inductor = medians["neuron compiled"] / medians["cpu inductor"]
        vs_eager = medians["neuron eager"] / medians["neuron compiled"]
        rows.append([case] + [f"{medians[name] * 1e3:.2f}" for name, *_ in variants]
                    + [f"{vs_inductor:.2f}x", f"{vs_eager:.2f}x"])
        figures[f"{case}_compiled_over_inductor"] = f"{vs_inductor:.2f}x"
        figures[f"{case}_eager_over_compiled"] = f"{vs_eager:.2f}x"
    steps = results.Table(
        f"Training step, median ms over {args.rounds} turns x {args.burst - 1} steps in each of "
        f"{args.processes} processes per variant"
        + (" (optimizer step eager)" if args.eager_optimizer else ""),
        ["model"] + [name for name, *_ in variants]
        + ["compiled / inductor (target ≤ 1.1x)", "eager / compiled (target ≥ 1.25x)"], rows)
    print(results.render([start, steps]))
    results.publish(__file__, [start, steps], figures, args.out)


if __name__ == "__main__":
    main()
