"""TorchTitan's llama3 debug model trains on `neuron` from its own configuration (its registry's
``llama3_debugmodel``, with CLI overrides for a short run) under real ``torchrun``: one process
(eager, and with its transformer blocks compiled), and two processes with FSDP. Its test assets
(a tokenizer and a C4 shard, which the wheel does not ship) are built locally. The CPU cannot be
the reference here: TorchTitan has no CPU device, and torch 2.13's CPU FlexAttention has no
backward (docs/ecosystem.md)."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import free_port
from local_hf import tokenizer

pytest.importorskip("torchtitan")
pytest.importorskip("triton")  # TorchTitan imports it unconditionally
HERE = Path(__file__).resolve().parent
STEPS = 6


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """TorchTitan's default asset paths (./tests/assets/...) under a fresh directory."""
    root = tmp_path_factory.mktemp("torchtitan")
    tokenizer().save_pretrained(root / "tests/assets/tokenizer")
    shard = root / "tests/assets/c4_test"
    shard.mkdir(parents=True)
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "a", "big", "red", "ball", "in", "park", "42"]
    rng = random.Random(0)
    with open(shard / "c4_sample.json", "w") as f:  # a file name with "test" in it would be the test split
        for _ in range(400):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(60)) + "."}) + "\n")
    return root


def train(workdir: Path, processes: int, *overrides: str) -> dict[int, list[float]]:
    """Losses per step, per logging rank, of a short TorchTitan run."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--master_port", str(free_port()), str(HERE / "torchtitan_launcher.py"),
               "--module", "llama3", "--config", "llama3_debugmodel", "--training.seq_len", "64",
               "--training.steps", str(STEPS), *overrides]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    losses: dict[int, list[float]] = {}
    for step, loss in re.findall(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)", plain):
        losses.setdefault(int(step), []).append(float(loss))
    assert sorted(losses) == list(range(1, STEPS + 1)), plain[-3000:]
    return losses


def assert_learns(losses: dict[int, list[float]]) -> None:
    first, last = losses[1][0], losses[STEPS][0]
    assert 7.0 < first < 9.0  # about ln(2048): random logits over the model's 2048-token vocabulary
    assert last < first - 2.0, losses


@pytest.mark.slow  # half a minute: kept out of the default suite's time budget
def test_one_process(workdir):
    assert_learns(train(workdir, 1, "--training.local_batch_size", "4"))


@pytest.mark.slow
def test_compiled_blocks_match_eager(workdir):
    # --compile.enable: each transformer block compiled by Inductor, the default backend; the same
    # seeded model and data as eager, so the losses agree up to fused rounding.
    eager = train(workdir, 1, "--training.local_batch_size", "4", "--debug.seed", "0")
    compiled = train(workdir, 1, "--training.local_batch_size", "4", "--debug.seed", "0", "--compile.enable")
    for step in eager:
        assert compiled[step][0] == pytest.approx(eager[step][0], rel=2e-3), (step, eager, compiled)
    assert_learns(compiled)


@pytest.mark.slow
def test_two_processes_with_fsdp(workdir):
    # torch 2.13's fully_shard does not turn TorchTitan's default spmd_types annotations into
    # DTensors (docs/ecosystem.md): its "partial_dtensor" backend is the documented choice.
    # Seeded (DTensor's RNG tracker initialises the sharded parameters), so two runs agree exactly.
    args = ("--training.local_batch_size", "2", "--parallelism.spmd_backend", "partial_dtensor", "--debug.seed", "0")
    losses = train(workdir, 2, *args)
    for step, reported in losses.items():
        assert len(reported) == 2 and reported[0] == reported[1], (step, reported)  # the ranks agree
    assert_learns(losses)
    assert train(workdir, 2, *args) == losses
