"""Every collective on ``neuron`` with real processes under torchrun (2 ranks by default, 4 in
the slow suite), each result compared with the CPU reference computed from every rank's inputs
(tests/distributed/collectives_worker.py)."""
from __future__ import annotations

import pytest
from collectives_worker import CHECKS
from launch import rank_results, torchrun


def run_all(tmp_path_factory: pytest.TempPathFactory, nproc: int) -> list[dict]:
    out = tmp_path_factory.mktemp(f"collectives_{nproc}")
    result = torchrun("collectives_worker.py", nproc, out)
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, nproc)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_all(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    return run_all(tmp_path_factory, 4)


@pytest.mark.parametrize("name", list(CHECKS))
def test_two_ranks(two_ranks, name):
    for rank, results in enumerate(two_ranks):
        assert results[name] == "ok", f"rank {rank}:\n{results[name]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHECKS))
def test_four_ranks(four_ranks, name):
    for rank, results in enumerate(four_ranks):
        assert results[name] == "ok", f"rank {rank}:\n{results[name]}"
