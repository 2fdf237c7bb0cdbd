"""Fixtures of the vLLM serving tests: tiny models saved as model directories, and vLLM runs in
processes of their own (vLLM sets process-wide state: torch's thread count, signal handlers, its
platform), on neuron or on vLLM's own CPU build for the baseline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_neuronx.testing.tiny_hf import save_tiny_causal_lm

DRIVER = Path(__file__).with_name("vllm_driver.py")
# No hub, no usage reports; the engine in the driver's process (start-up in seconds, not tens).
BASE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1",
            "VLLM_HOST_IP": "127.0.0.1", "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# vLLM's CPU platform sizes its KV cache from this (GiB); without it, from 90% of the host memory.
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
ENGINE = dict(dtype="float32", enforce_eager=True, max_model_len=256, seed=0, kv_cache_memory_bytes=16 << 20)

# Prompts of many lengths (1 to 70 tokens of the character tokenizer), crossing 32-token blocks.
PROMPTS = ["hello world", "a", "the quick brown fox jumps over the lazy dog",
           "once upon a time there was a small model that served tokens on a simulated chip",
           "1, 2, 3, 4, 5, 6", "what is two plus two?", "neuron cores", "vllm serves many requests at once",
           "z", "pack my box with five dozen liquor jugs", "how vexingly quick daft zebras jump",
           "the five boxing wizards jump quickly", "sphinx of black quartz, judge my vow",
           "a wizard's job is to vex chumps quickly in fog", "quick zephyrs blow, vexing daft jim",
           "we promptly judged antique ivory buckles for the next prize"]
GREEDY = dict(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=1)
# A single request, then all prompts at once: the runs most tests compare.
GREEDY_BATCHES = [{"prompts": PROMPTS[:1], "sampling": GREEDY}, {"prompts": PROMPTS, "sampling": GREEDY}]


def run_vllm(model: Path, batches: list[dict], device: str = "neuron", timeout: float = 600,
             env: dict | None = None, fails: bool = False, **engine) -> dict | str:
    """Run the driver with `batches` ({"prompts", "sampling"[, "fault"]}) on `device` with `env`
    added; its report, or with `fails` its error output (the run must fail)."""
    plan = Path(model).parent / f"plan-{os.getpid()}-{abs(hash(json.dumps(batches))) % 10**8}.json"
    plan.write_text(json.dumps({"model": str(model), "engine": {**ENGINE, **engine}, "batches": batches}))
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_NEURONX_", "VLLM_"))}
    full.update(BASE_ENV)
    full.update(CPU_ENV if device == "cpu" else {"TORCH_NEURONX_STRICT_FALLBACK": "1"})
    full.update(env or {})
    done = subprocess.run([sys.executable, str(DRIVER), str(plan)], env=full, capture_output=True, text=True,
                          timeout=timeout)
    if fails:
        assert done.returncode != 0, done.stdout[-3000:]
        return done.stderr
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, f"vLLM on {device} failed:\n{done.stderr[-6000:]}"
    report = json.loads(results[-1][len("RESULT "):])
    assert report["platform"] == device, report["platform"]
    return report


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """family -> a tiny model of that family saved with its tokenizer (built on first use)."""
    root = tmp_path_factory.mktemp("serving_models")

    class Models(dict):
        def __missing__(self, family: str) -> Path:
            self[family] = save_tiny_causal_lm(root / family, family)
            return self[family]

    return Models()


@pytest.fixture(scope="session")
def llama(model_dirs) -> Path:
    return model_dirs["llama"]


@pytest.fixture(scope="session")
def cpu_greedy(llama) -> dict:
    """vLLM's CPU build on GREEDY_BATCHES: the baseline."""
    return run_vllm(llama, GREEDY_BATCHES, device="cpu")


def completions(report: dict, batch: int) -> list[dict]:
    """The completions of a batch, in prompt order (n of them per prompt)."""
    return [out for request in report["batches"][batch]["outputs"] for out in request["outputs"]]
