"""Hugging Face models on `neuron` against the CPU: a tiny Llama (from its config class) as a user
runs it, one intra-op thread on both sides.

(a) forward + backward (batch 2 x 32 tokens): median seconds per step after warm-up;
(b) a 20-token greedy `generate()` (batch 1, 8-token prompt): median seconds per call;
(c) `torch.compile(backend="neuron")` of forward + backward: the first step in a new process with
    an empty compile cache (cold) and in another process with the cache it left (warm).

(a) and (b) run in three pairs of new processes, one per device (on a small shared machine one
process can run at another speed than the next, the whole process long); the two processes of a
pair take turns, a round each, five times (the machine's speed also drifts in phases, so a round
is compared with the other device's round next to it). Times are medians over the rounds, ratios
medians of the rounds' ratios. (c) is the median of three compiles of each kind. Targets: (a) and
(b) at most 1.1x the CPU, (c) cold under 15 s.

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


def eager(device_name: str, warmup: int, repeats: int) -> tuple[None, Callable[[], tuple[float, float]]]:
    """The tiny Llama in this process on one device, warmed up, and a function that times a round:
    the medians of ``repeats`` forward+backward steps and of ``repeats`` 20-token generates (s)."""
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

    for _ in range(warmup):
        train_step()
        generate()
    sync()
    return None, lambda: (median_seconds(train_step, sync, 0, repeats), median_seconds(generate, sync, 0, repeats))


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
    warmup, repeats, turns, rounds = (1, 3, 1, 2) if args.quick else (3, 5, 3, 5)
    runs = processes.interleaved_in_turns(eager, ("cpu", "neuron"), turns, rounds, warmup, repeats)
    (cpu_step, cpu_generate), (dev_step, dev_generate) = (
        [statistics.median(r[i] for r in runs[name]) for i in (0, 1)] for name in ("cpu", "neuron"))
    for i, what in enumerate(("forward + backward", "generate")):
        print(what, "ms per round, neuron / cpu:",
              [f"{n[i] * 1e3:.1f}/{c[i] * 1e3:.1f}" for n, c in zip(runs["neuron"], runs["cpu"])], flush=True)
    step_ratio, generate_ratio = (processes.paired_ratio([n[i] for n in runs["neuron"]], [c[i] for c in runs["cpu"]])
                                  for i in (0, 1))
    colds, warms = [], []
    for _ in range(turns):
        with tempfile.TemporaryDirectory() as cache:
            colds.append(first_compiled_step(cache))
            warms.append(first_compiled_step(cache))
    cold, warm = statistics.median(colds), statistics.median(warms)
    eager_table = results.Table(
        f"(a, b) Tiny Llama eager, one intra-op thread: {turns} pairs of processes (one per device) taking "
        f"turns {rounds} rounds each, a round the median of {repeats} calls; times the medians over rounds, "
        "ratios the medians of the rounds' ratios",
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
