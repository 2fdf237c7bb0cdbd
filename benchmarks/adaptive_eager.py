"""Adaptive eager against plain eager and torch.compile(backend="neuron"), side by side.

Two training loops, each step ending with ``loss.item()`` as a logging loop does:

(a) an elementwise-heavy model: a stack of 4 RMSNorm + SwiGLU blocks (width 512, hidden 1024:
    6.3 M parameters) on 16 tokens per step, AdamW: the optimizer's elementwise passes over every
    parameter outweigh the matmuls;
(b) the TinyGPT training step (forward, backward, AdamW; batch 8, block 64, default config).

Each loop runs in three modes on identically initialized models: plain eager, adaptive eager
(``torch_neuronx.eager_mode("adaptive")``) and the model and optimizer step compiled with
``torch.compile(backend="neuron")``, each mode in a process of its own (in one process, the
compiled graphs' compute threads and the device worker's slow each other down, which would
charge one mode for another). Warm-up, one process after the other: adaptive trains until a step
runs a fused kernel (the steps and compile seconds that took are reported: compiles run in the
background while it trains), then until its compiles are done; compiled runs until compiled.
Then the modes take turns, a round of steps each, the others waiting idle: two-thread kernels
on the development machine change speed in phases of seconds to minutes (benchmarks/processes.py),
and a turn's rounds run within seconds of each other. Figures: the median over rounds of each
mode's time per step; ratios, the median over turns of the ratio within a turn.

Targets (issue "adaptive eager"): (a) adaptive at least 1.3x faster than eager, (b) never slower
than eager, and on both at least 80% of the compiled speed.

Where (b)'s step spends its time: three more processes take the same turns with the same step
on small tensors (vocabulary 8, width 8, batch 2, block 64 as in (b): the same operators, which
adaptive eager fuses into the same segments, with kernels of little work), which times each
mode's host work per step: adaptive, compiled, and PyTorch's own eager on the CPU (AdamW's
``foreach`` path, as on the device). The step's time beyond its host work is its kernels and the
waits for them. From these, the bound of an eager mode with no work of its own: PyTorch's CPU
dispatch, then the compiled graphs' kernels (compiled step - its host work), one after the other
as on the program's thread, in percent of the compiled speed.

    python benchmarks/adaptive_eager.py                        # publishes to docs/benchmarks
    python benchmarks/adaptive_eager.py --quick --out /tmp/b   # smoke test
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

import processes
import results
import torch_neuronx
from torch_neuronx.adaptive import segments
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

SPEEDUP_TARGET = 1.3  # (a) adaptive vs eager
NOT_SLOWER = 1.0  # (b)
OF_COMPILED_TARGET = 0.8  # both: compiled time / adaptive time
MODES = ("eager", "adaptive", "compiled")
ROUNDS = 15


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class SwiGLUBlock(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = RMSNorm(width)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def swiglu_stack(mode: str, quick: bool) -> Callable[[], float]:
    width, hidden, layers, tokens = (128, 256, 2, 16) if quick else (512, 1024, 4, 16)
    torch.manual_seed(0)
    model = nn.Sequential(*[SwiGLUBlock(width, hidden) for _ in range(layers)]).to("neuron")
    x = torch.randn(tokens, width).to("neuron")
    return _train(model, lambda m: m(x).square().mean(), mode)


def tiny_gpt(mode: str, quick: bool, host_only: bool = False) -> Callable[[], float]:
    """``host_only``: the same operators on small tensors; mode "cpu" runs them on the CPU."""
    config = GPTConfig(vocab_size=8, n_embd=8) if host_only else GPTConfig()
    device = "cpu" if mode == "cpu" else "neuron"
    torch.manual_seed(0)
    model = TinyGPT(config).to(device)
    ((x, y),) = make_batches(1, 2 if host_only else 8, config.block_size, config.vocab_size, seed=0)
    x, y = x.to(device), y.to(device)
    return _train(model, lambda m: m(x, y)[1], mode)


def _train(model: nn.Module, loss_of: Callable[[nn.Module], torch.Tensor], mode: str) -> Callable[[], float]:
    # foreach: the device's default; the CPU's is a Python loop over the parameters.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    forward, update = (lambda: loss_of(model)), optimizer.step
    if mode == "compiled":
        compiled_model = torch.compile(model, backend="neuron")
        forward = lambda: loss_of(compiled_model)  # noqa: E731
        update = torch.compile(optimizer.step, backend="neuron")

    def step() -> float:
        loss = forward()
        loss.backward()
        update()
        optimizer.zero_grad()
        return loss.item()

    return step


def warm_up(step: Callable[[], float], mode: str, budget_s: float) -> tuple[int, float]:
    """Adaptive: the steps until a step runs fused kernels (compiles run in the background meanwhile;
    at most ``budget_s`` seconds) and the compile seconds spent by then, then steps until its
    compiles are done (not counted). Other modes: a few steps."""
    if mode != "adaptive":
        for _ in range(3):
            step()
        return 0, 0.0
    steps, deadline = 0, time.perf_counter() + budget_s
    while time.perf_counter() < deadline:
        before = torch_neuronx.get_adaptive_metrics()["fused_launches"]
        step()
        steps += 1
        if torch_neuronx.get_adaptive_metrics()["fused_launches"] > before:
            break
    seconds = torch_neuronx.get_adaptive_metrics()["compile_time_s"]
    for _ in range(3):  # segments that first appear once others are fused
        segments.wait_for_compiles()
        step()
    return steps, seconds


WORKLOADS = {"swiglu": swiglu_stack, "gpt": tiny_gpt}
HOST_SIDES = ("adaptive host", "compiled host", "cpu host")  # (b)'s step on small tensors


def rounds_of(side: str, workload: str, quick: bool) -> tuple[dict[str, float | int], Callable[[], dict]]:
    """One side (a mode, or a mode's host work) of one workload in this process, warmed up: its
    warm-up figures, and a function that times one round of steps (ms per step) and reads the
    adaptive counters after it."""
    mode = side.removesuffix(" host")
    step = tiny_gpt(mode, quick, host_only=True) if side in HOST_SIDES else WORKLOADS[workload](mode, quick)
    if mode == "adaptive":
        torch_neuronx.set_eager_mode("adaptive")
    warm_steps, compile_s = warm_up(step, mode, 30 if quick else 120)
    per_round = 5 if quick else 30

    counted = ("fused_launches", "calls_fused") if mode == "adaptive" else ()  # the CPU's process has no device

    def run_round() -> dict[str, float | int]:
        before = torch_neuronx.get_adaptive_metrics() if counted else {}
        start = time.perf_counter()
        for _ in range(per_round):
            step()
        ms = (time.perf_counter() - start) / per_round * 1e3
        after = torch_neuronx.get_adaptive_metrics() if counted else {}
        return {"ms": ms, **{k: (after[k] - before[k]) / per_round for k in counted}}

    return {"warmup_steps": warm_steps, "compile_s": compile_s}, run_round


def measure_interleaved(workload: str, quick: bool, sides: tuple[str, ...]) -> dict[str, float | int]:
    """Every side of a workload in a process of its own, the sides taking turns round by round:
    the median per side of the rounds' ms per step, and the median over turns of the ratio of
    each mode's round to the adaptive round of the same turn (measured seconds apart)."""
    caches = tempfile.mkdtemp(prefix="adaptive_eager_bench_")  # the adaptive warm-up starts cold
    try:
        # The mode processes inherit the environment when they start.
        with mock.patch.dict(os.environ, {"TORCH_NEURONX_NEFF_CACHE_DIR": os.path.join(caches, "neuron"),
                                          "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor")}):
            infos, rounds = processes.interleaved(rounds_of, sides, 3 if quick else ROUNDS, workload, quick)
    finally:
        shutil.rmtree(caches, ignore_errors=True)
    ms = {side: [r["ms"] for r in rounds[side]] for side in sides}
    fused = {k: statistics.median(r[k] for r in rounds["adaptive"]) for k in ("fused_launches", "calls_fused")}
    print(workload, {side: [round(t, 2) for t in ms[side]] for side in sides},
          [r["fused_launches"] for r in rounds["adaptive"]], flush=True)
    out = {**infos["adaptive"], **fused,
           **{f"{side}_ms": statistics.median(ms[side]) for side in sides},
           "speedup": processes.paired_ratio(ms["eager"], ms["adaptive"]),
           "of_compiled": processes.paired_ratio(ms["compiled"], ms["adaptive"])}
    if "cpu host" in sides:  # per turn: compiled / (CPU dispatch + compiled kernels)
        bounds = [c / (cpu + c - ch) for c, cpu, ch in zip(ms["compiled"], ms["cpu host"], ms["compiled host"])]
        out["bound_of_compiled"] = statistics.median(bounds)
        out["host_calls_fused"] = statistics.median(r["calls_fused"] for r in rounds["adaptive host"])
    return out


def host_table(r: dict[str, float]) -> results.Table:
    """Where (b)'s step spends its time, from its host-work sides."""
    rows = [[mode, f"{r[f'{mode}_ms']:.2f}", f"{r[f'{mode} host_ms']:.2f}",
             f"{r[f'{mode}_ms'] - r[f'{mode} host_ms']:.2f}"] for mode in ("adaptive", "compiled")]
    rows[0][0] += f" ({r['calls_fused']:.0f} calls fused a step; on small tensors {r['host_calls_fused']:.0f})"
    rows.append(["PyTorch eager on the CPU (host work only)", "", f"{r['cpu host_ms']:.2f}", ""])
    return results.Table(
        "TinyGPT step: host work (the step on small tensors) and the rest (kernels, waits), ms; the bound of "
        f"an eager mode with no work of its own (PyTorch's CPU dispatch, then the compiled kernels): "
        f"{r['bound_of_compiled']:.0%} of compiled speed",
        ["mode", "step", "host work", "kernels and waits"], rows)


def main() -> None:
    args = results.parser(__doc__)
    args.add_argument("--quick", action="store_true", help="small shapes and few steps (smoke test)")
    opts = args.parse_args()
    workloads = {"swiglu": ("RMSNorm + SwiGLU stack, AdamW", SPEEDUP_TARGET), "gpt": ("TinyGPT train step", NOT_SLOWER)}
    rows, figures = [], {}
    for key, (name, target) in workloads.items():
        r = measure_interleaved(key, opts.quick, MODES + (HOST_SIDES if key == "gpt" else ()))
        print(name, r, flush=True)
        rows.append([name, f"{r['eager_ms']:.1f}", f"{r['adaptive_ms']:.1f}", f"{r['compiled_ms']:.1f}",
                     f"{r['speedup']:.2f}x ({results.verdict(target, r['speedup'])})",
                     f"{r['of_compiled']:.0%} ({results.verdict(OF_COMPILED_TARGET, r['of_compiled'])})",
                     f"{r['warmup_steps']} steps, {r['compile_s']:.1f} s compiling",
                     f"{r['calls_fused'] / max(r['fused_launches'], 1):.0f}"])
        figures.update({f"{key}_speedup": f"{r['speedup']:.2f}x", f"{key}_of_compiled": f"{r['of_compiled']:.0%}",
                        f"{key}_warmup_steps": str(r["warmup_steps"])})
    figures["gpt_bound_of_compiled"] = f"{r['bound_of_compiled']:.0%}"
    table = results.Table(
        f"Training step, ms (one process per mode, the modes taking turns for {ROUNDS} rounds of 30 steps; "
        "medians over rounds, ratios the medians of each round's ratio; each step ends with loss.item()); "
        "warm-up: the adaptive process, caches cold",
        ["workload", "eager", "adaptive", "compiled", "adaptive vs eager", "of compiled speed",
         "adaptive warm-up", "calls per fused launch"], rows)
    results.publish(__file__, [table, host_table(r)], figures, opts.out)


if __name__ == "__main__":
    main()
