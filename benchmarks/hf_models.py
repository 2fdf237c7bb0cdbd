"""Hugging Face models on `neuron` against the CPU: a tiny Llama (from its config class) as a user
runs it, one intra-op thread on both sides.

(a) forward + backward (batch 2 x 32 tokens): median seconds per step after warm-up;
(b) a 20-token greedy `generate()` (batch 1, 8-token prompt): median seconds per call;
(c) `torch.compile(backend="neuron")` of forward + backward: the first step in a new process with
    an empty compile cache (cold) and in another process with the cache it left (warm).

Each figure is the median over three processes per device (and three compiles of each kind), the
devices taking turns: on a small shared machine one process can run at another speed than the
next, the whole process long. Targets: (a) and (b) at most 1.1x the CPU, (c) cold under 15 s.

    python benchmarks/hf_models.py                        # publishes to docs/benchmarks
    python benchmarks/hf_models.py --quick --out /tmp/b   # smoke test
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch

import processes
import results
from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama

EAGER_TARGET = 1.1
COLD_COMPILE_TARGET_S = 15.0


def median_seconds(step: Callable[[], object], sync: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def eager(device_name: str, warmup: int, repeats: int) -> tuple[float, float]:
    """Seconds per forward+backward step and per 20-token generate on one device."""
    torch.set_num_threads(1)
    device = torch.device(device_name)
    sync = torch.get_device_module(device).synchronize if device.type != "cpu" else (lambda: None)
    model = tiny_llama().to(device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (2, 32), generator=g).to(device)

    def train_step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    prompt = torch.randint(3, VOCAB, (1, 8), generator=g).to(device)

    def generate() -> object:
        with torch.no_grad():
            return model.generate(prompt, max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=0)

    return median_seconds(train_step, sync, warmup, repeats), median_seconds(generate, sync, warmup, repeats)


def eager_in_turns(turns: int, warmup: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Per device, the medians over ``turns`` processes of :func:`eager`'s two figures."""
    runs = processes.in_turns(eager, ("cpu", "neuron"), turns, warmup, repeats)
    return {name: (statistics.median(f[0] for f in figures), statistics.median(f[1] for f in figures))
            for name, figures in runs.items()}


COMPILE_STEP = """
import time, torch
from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama
torch.set_num_threads(1)
model = tiny_llama().to("neuron")
ids = torch.randint(3, VOCAB, (2, 32), generator=torch.Generator().manual_seed(0)).to("neuron")
compiled = torch.compile(model, backend="neuron")
start = time.perf_counter()
compiled(input_ids=ids, labels=ids).loss.backward()
torch.neuron.synchronize()
print(time.perf_counter() - start)
"""


def first_compiled_step(cache: str) -> float:
    """Seconds of the first compiled forward+backward in a new process using ``cache``."""
    env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": cache, "TORCHINDUCTOR_CACHE_DIR": cache + "/inductor",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", COMPILE_STEP], env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = results.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    args = parser.parse_args()
    warmup, repeats, turns = (1, 3, 1) if args.quick else (3, 15, 3)
    medians = eager_in_turns(turns, warmup, repeats)
    cpu_step, cpu_generate = medians["cpu"]
    dev_step, dev_generate = medians["neuron"]
    colds, warms = [], []
    for _ in range(turns):
        with tempfile.TemporaryDirectory() as cache:
            colds.append(first_compiled_step(cache))
            warms.append(first_compiled_step(cache))
    cold, warm = statistics.median(colds), statistics.median(warms)
    step_ratio, generate_ratio = dev_step / cpu_step, dev_generate / cpu_generate
    eager_table = results.Table(
        f"(a, b) Tiny Llama eager, one intra-op thread: median over {turns} processes per device of each "
        f"one's median of {repeats} after {warmup} warm-up",
        ["workload", "neuron ms", "cpu ms", "neuron/cpu", f"target ≤ {EAGER_TARGET:g}x"],
        [["forward + backward (2 x 32 tokens)", f"{dev_step * 1e3:.2f}", f"{cpu_step * 1e3:.2f}",
          f"{step_ratio:.2f}x", results.verdict(step_ratio, EAGER_TARGET)],
         ["generate 20 tokens (greedy)", f"{dev_generate * 1e3:.1f}", f"{cpu_generate * 1e3:.1f}",
          f"{generate_ratio:.2f}x", results.verdict(generate_ratio, EAGER_TARGET)]])
    compile_table = results.Table(
        f"(c) First compiled forward + backward of the tiny Llama (backend=\"neuron\"), in a new process "
        f"(median of {turns} each)",
        ["compile cache", "seconds", f"target (cold) < {COLD_COMPILE_TARGET_S:g} s"],
        [["empty (cold)", f"{cold:.1f}", results.verdict(cold, COLD_COMPILE_TARGET_S)],
         ["filled by the cold run (warm)", f"{warm:.1f}", ""]])
    print(results.render([eager_table, compile_table]))
    results.publish(__file__, [eager_table, compile_table], {
        "train_step_ratio": f"{step_ratio:.2f}x", "generate_ratio": f"{generate_ratio:.2f}x",
        "cold_compile_s": f"{cold:.1f} s", "warm_compile_s": f"{warm:.1f} s"}, args.out)


if __name__ == "__main__":
    main()
