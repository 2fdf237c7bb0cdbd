"""Adaptive eager against plain eager and torch.compile(backend="neuron"), side by side.

Two training loops, each step ending with ``loss.item()`` as a logging loop does:

(a) an elementwise-heavy model: a stack of RMSNorm + SwiGLU blocks, AdamW (its update runs over
    every parameter, several elementwise passes each);
(b) the TinyGPT training step (forward, backward, AdamW; batch 8, block 64, default config).

Each loop runs in three modes on identically initialized models: plain eager, adaptive eager
(``torch_neuronx.eager_mode("adaptive")``) and the model and optimizer step compiled with
``torch.compile(backend="neuron")``. Warm-up: adaptive runs until its segments are fused, counting
the steps and compile seconds that took (compiles run in the background while it trains); compiled
runs until compiled. Then rounds of steps alternate between the modes (one process, so no mode
gets a quieter machine); the figure is the median over rounds of the time per step.

Targets (issue "adaptive eager"): (a) adaptive at least 1.3x faster than eager, (b) never slower
than eager, and on both at least 80% of the compiled speed.

    python benchmarks/adaptive_eager.py                        # publishes to docs/benchmarks
    python benchmarks/adaptive_eager.py --quick --out /tmp/b   # smoke test
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import results
import torch_neuronx
from torch_neuronx.adaptive import reset_adaptive, segments
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches

SPEEDUP_TARGET = 1.3  # (a) adaptive vs eager
NOT_SLOWER = 1.0  # (b)
OF_COMPILED_TARGET = 0.8  # both: compiled time / adaptive time
MODES = ("eager", "adaptive", "compiled")


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
    width, hidden, layers, tokens = (128, 256, 2, 16) if quick else (512, 1024, 4, 64)
    torch.manual_seed(0)
    model = nn.Sequential(*[SwiGLUBlock(width, hidden) for _ in range(layers)]).to("neuron")
    x = torch.randn(tokens, width).to("neuron")
    return _train(model, lambda m: m(x).square().mean(), mode)


def tiny_gpt(mode: str, quick: bool) -> Callable[[], float]:
    config = GPTConfig()
    torch.manual_seed(0)
    model = TinyGPT(config).to("neuron")
    ((x, y),) = make_batches(1, 8, config.block_size, config.vocab_size, seed=0)
    x, y = x.to("neuron"), y.to("neuron")
    return _train(model, lambda m: m(x, y)[1], mode)


def _train(model: nn.Module, loss_of: Callable[[nn.Module], torch.Tensor], mode: str) -> Callable[[], float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
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

    if mode != "adaptive":
        return step

    def adaptive_step() -> float:
        with torch_neuronx.eager_mode("adaptive"):
            return step()
    return adaptive_step


def warm_up(step: Callable[[], float], mode: str, limit: int) -> tuple[int, float]:
    """Steps until the mode runs as it will when timed (adaptive: a step with fused launches and
    no compile pending), and for adaptive the compile seconds spent meanwhile."""
    if mode != "adaptive":
        for _ in range(3):
            step()
        return 0, 0.0
    start = torch_neuronx.get_adaptive_metrics()
    for n in range(1, limit + 1):
        before = torch_neuronx.get_adaptive_metrics()["fused_launches"]
        step()
        after = torch_neuronx.get_adaptive_metrics()
        if after["fused_launches"] > before and not after["compiles_pending"]:
            return n, after["compile_time_s"] - start["compile_time_s"]
    segments.wait_for_compiles()
    return limit, torch_neuronx.get_adaptive_metrics()["compile_time_s"] - start["compile_time_s"]


def measure(build: Callable[[str, bool], Callable[[], float]], quick: bool) -> dict[str, float | int]:
    reset_adaptive()
    steps = {mode: build(mode, quick) for mode in MODES}
    warm = {mode: warm_up(steps[mode], mode, 10 if quick else 40) for mode in MODES}
    rounds, per_round = (2, 5) if quick else (5, 40)
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            time.sleep(0.05)
            start = time.perf_counter()
            for _ in range(per_round):
                steps[mode]()
            samples[mode].append((time.perf_counter() - start) / per_round)
    metrics = torch_neuronx.get_adaptive_metrics()
    reset_adaptive()
    ms = {mode: statistics.median(samples[mode]) * 1e3 for mode in MODES}
    return {**{f"{mode}_ms": ms[mode] for mode in MODES},
            "speedup": ms["eager"] / ms["adaptive"], "of_compiled": ms["compiled"] / ms["adaptive"],
            "warmup_steps": warm["adaptive"][0], "compile_s": warm["adaptive"][1],
            "fused_launches": metrics["fused_launches"], "calls_fused": metrics["calls_fused"],
            "steps": rounds * per_round}


def main() -> None:
    args = results.parser(__doc__)
    args.add_argument("--quick", action="store_true", help="small shapes and few steps (smoke test)")
    opts = args.parse_args()
    workloads = {"RMSNorm + SwiGLU stack, AdamW": (swiglu_stack, SPEEDUP_TARGET),
                 "TinyGPT train step": (tiny_gpt, NOT_SLOWER)}
    rows, figures = [], {}
    for (name, (build, target)), key in zip(workloads.items(), ("swiglu", "gpt")):
        r = measure(build, opts.quick)
        print(name, r, flush=True)
        rows.append([name, f"{r['eager_ms']:.1f}", f"{r['adaptive_ms']:.1f}", f"{r['compiled_ms']:.1f}",
                     f"{r['speedup']:.2f}x ({results.verdict(target, r['speedup'])})",
                     f"{r['of_compiled']:.0%} ({results.verdict(OF_COMPILED_TARGET, r['of_compiled'])})",
                     f"{r['warmup_steps']} steps, {r['compile_s']:.1f} s compiling",
                     f"{r['calls_fused'] / max(r['fused_launches'], 1):.0f}"])
        figures.update({f"{key}_speedup": f"{r['speedup']:.2f}x", f"{key}_of_compiled": f"{r['of_compiled']:.0%}",
                        f"{key}_warmup_steps": str(r["warmup_steps"])})
    table = results.Table(
        "Training step, ms (median over rounds; each step ends with loss.item())",
        ["workload", "eager", "adaptive", "compiled", "adaptive vs eager", "of compiled speed",
         "adaptive warm-up", "calls per fused launch"], rows)
    results.publish(__file__, [table], figures, opts.out)


if __name__ == "__main__":
    main()
