"""Every collective on ``neuron`` with real processes under torchrun (2 ranks by default, 4 in
the slow suite), each result compared with the CPU reference computed from every rank's inputs
(tests/distributed/collectives_worker.py), over the shared-memory transport of ranks on one host
and over Gloo, the transport across hosts."""
from __future__ import annotations

import pytest
from collectives_worker import CHECKS
from launch import assert_check_ok, rank_results, torchrun


def run_all(tmp_path_factory: pytest.TempPathFactory, nproc: int, shared_memory: bool = True,
            **env: str) -> list[dict]:
    out = tmp_path_factory.mktemp(f"collectives_{nproc}")
    result = torchrun("collectives_worker.py", nproc, out,
                      env={"TORCH_NEURONX_DIST_SHARED_MEMORY": "1" if shared_memory else "0", **env})
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, nproc)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_all(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def two_ranks_over_gloo(tmp_path_factory):
    """The transport of ranks on different hosts, here on one."""
    return run_all(tmp_path_factory, 2, shared_memory=False)


BOUND_CHECKS = ("backend_is_neuron", "split_group_and_device_mesh_with_a_bound_device", "subgroups_and_split",
                "all_reduce_every_op_and_dtype", "mismatched_shapes_give_an_error")


@pytest.fixture(scope="module")
def two_ranks_bound_to_their_cores(tmp_path_factory):
    """``init_process_group(device_id=...)``: torch then asks the group for its neuron backend
    and makes subgroups (and DeviceMesh's) by splitting it."""
    return run_all(tmp_path_factory, 2, DEVICE_ID="1", CHECKS=",".join(BOUND_CHECKS))


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    return run_all(tmp_path_factory, 4)


@pytest.mark.parametrize("name", list(CHECKS))
def test_two_ranks(two_ranks, name):
    assert_check_ok(two_ranks, name)


@pytest.mark.parametrize("name", list(CHECKS))
def test_two_ranks_over_gloo(two_ranks_over_gloo, name):
    assert_check_ok(two_ranks_over_gloo, name)


@pytest.mark.parametrize("name", BOUND_CHECKS)
def test_two_ranks_bound_to_their_cores(two_ranks_bound_to_their_cores, name):
    assert_check_ok(two_ranks_bound_to_their_cores, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHECKS))
def test_four_ranks(four_ranks, name):
    assert_check_ok(four_ranks, name)
