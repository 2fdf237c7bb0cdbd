"""Parallelism APIs unchanged on ``neuron``: DDP training of the small GPT across processes equals
single-process CPU training on the same global batch (tests/distributed/ddp_worker.py)."""
from __future__ import annotations

import json

import pytest
from launch import torchrun


@pytest.mark.parametrize("nproc", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ddp_training_matches_cpu_training_on_the_global_batch(tmp_path, nproc):
    result = torchrun("ddp_worker.py", nproc, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    losses = json.loads((tmp_path / "ddp.json").read_text())
    assert len(losses["losses"]) == 5 and losses["losses"][-1] < losses["losses"][0]
