"""Parallelism APIs unchanged on ``neuron``: the small GPT trained for 20 steps under DDP, FSDP2,
tensor parallelism, FSDP2 x TP and pipeline parallelism equals single-process CPU training on the
same global batch (tests/distributed/gpt_worker.py); DTensor, tensor parallelism and FSDP2
features match the same computation on the CPU (sharding_worker.py); sharded checkpoints
(checkpoint_worker.py); two torchrun "nodes" on one TCP rendezvous."""
from __future__ import annotations

from pathlib import Path

import pytest
from gpt_worker import CHECKS as GPT_CHECKS
from launch import assert_check_ok, rank_results, separate_hosts_available, torchrun, torchrun_nodes
from sharding_worker import CHECKS as SHARDING_CHECKS


def checks_on(script: str, nproc: int, out: Path) -> list[dict]:
    """Every rank's outcomes of ``script``'s checks on ``nproc`` local ranks."""
    result = torchrun(script, nproc, out)
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, nproc)


def assert_all_ok(outcomes: list[dict], names: dict) -> None:
    failed = {(rank, name): outcome for rank, results in enumerate(outcomes)
              for name, outcome in results.items() if outcome != "ok"}
    assert not failed, failed
    assert all(set(results) == set(names) for results in outcomes)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return checks_on("gpt_worker.py", 2, tmp_path_factory.mktemp("gpt"))


@pytest.mark.parametrize("name", list(GPT_CHECKS))
def test_20_steps_of_gpt_training_match_cpu_training(gpt, name):
    assert_check_ok(gpt, name)


@pytest.fixture(scope="module")
def sharding(tmp_path_factory):
    return checks_on("sharding_worker.py", 2, tmp_path_factory.mktemp("sharding"))


@pytest.mark.parametrize("name", list(SHARDING_CHECKS))
def test_sharded_parallelism(sharding, name):
    assert_check_ok(sharding, name)


@pytest.mark.slow
@pytest.mark.parametrize("script, names", [("gpt_worker.py", GPT_CHECKS), ("sharding_worker.py", SHARDING_CHECKS)])
def test_the_same_checks_on_four_ranks(tmp_path, script, names):
    """A 4-rank world: the 2-D mesh is (2, 2), pipelines have 4 stages."""
    assert_all_ok(checks_on(script, 4, tmp_path), names)


@pytest.mark.parametrize("saved_on", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_a_sharded_checkpoint_loads_on_two_ranks(tmp_path, saved_on):
    checkpoint = str(tmp_path / "checkpoint")
    saved = torchrun("checkpoint_worker.py", saved_on, tmp_path, "save", checkpoint)
    assert saved.returncode == 0, saved.stderr[-4000:]
    loaded = torchrun("checkpoint_worker.py", 2, tmp_path, "load", checkpoint)
    assert loaded.returncode == 0, loaded.stderr[-4000:]


@pytest.mark.skipif(not separate_hosts_available(), reason="needs UTS namespaces (root) for a host name per node")
def test_training_across_two_nodes_matches_cpu_training(tmp_path):
    """Two torchrun trees (``--nnodes 2 --node_rank r``, one rank each, both on their core 0), each
    under its own host name, meeting at one TCP rendezvous train as one world: DDP and a two-stage
    pipeline, over Gloo, the transport between hosts."""
    names = {"ddp_gpt_matches_cpu": None, "pipeline_gpt_matches_cpu": None}
    env = {"CHECKS": ",".join(names), "STEPS": "5"}
    for code, stderr in torchrun_nodes("gpt_worker.py", 2, 1, tmp_path, env=env, hosts=["node-a", "node-b"]):
        assert code == 0, stderr[-4000:]
    assert_all_ok(rank_results(tmp_path, 2), names)
