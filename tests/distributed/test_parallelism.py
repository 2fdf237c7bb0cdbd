"""Parallelism APIs unchanged on ``neuron``: DDP training of the small GPT across processes equals
single-process CPU training on the same global batch (tests/distributed/ddp_worker.py); DTensor,
tensor parallelism and FSDP2 match the same computation on the CPU (sharding_worker.py)."""
from __future__ import annotations

import json

import pytest
from launch import rank_results, torchrun
from sharding_worker import CHECKS as SHARDING_CHECKS


@pytest.mark.parametrize("nproc", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ddp_training_matches_cpu_training_on_the_global_batch(tmp_path, nproc):
    result = torchrun("ddp_worker.py", nproc, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    losses = json.loads((tmp_path / "ddp.json").read_text())
    assert len(losses["losses"]) == 5 and losses["losses"][-1] < losses["losses"][0]


@pytest.fixture(scope="module")
def sharding(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharding")
    result = torchrun("sharding_worker.py", 2, out)
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, 2)


@pytest.mark.parametrize("name", list(SHARDING_CHECKS))
def test_sharded_parallelism(sharding, name):
    for rank, results in enumerate(sharding):
        assert results[name] == "ok", f"rank {rank}:\n{results[name]}"


@pytest.mark.slow
def test_sharded_parallelism_on_four_ranks(tmp_path):
    """The same checks on a 4-rank world: the 2-D mesh is (2, 2), pipelines have 4 stages."""
    result = torchrun("sharding_worker.py", 4, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    failed = {(rank, name): outcome for rank, results in enumerate(rank_results(tmp_path, 4))
              for name, outcome in results.items() if outcome != "ok"}
    assert not failed, failed
    assert set(rank_results(tmp_path, 4)[0]) == set(SHARDING_CHECKS)


@pytest.mark.parametrize("saved_on", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_a_sharded_checkpoint_loads_on_two_ranks(tmp_path, saved_on):
    checkpoint = str(tmp_path / "checkpoint")
    saved = torchrun("checkpoint_worker.py", saved_on, tmp_path, "save", checkpoint)
    assert saved.returncode == 0, saved.stderr[-4000:]
    loaded = torchrun("checkpoint_worker.py", 2, tmp_path, "load", checkpoint)
    assert loaded.returncode == 0, loaded.stderr[-4000:]
