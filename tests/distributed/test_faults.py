"""A rank that dies or comes too late makes the others' collective raise, naming it and the
collective, within the timeout; the device stays usable, and so does a new process group
(tests/distributed/fault_worker.py). The error names the missing rank over both transports:
the shared-memory barrier sees it, and after a Gloo failure the survivor looks up the peers on
its host, and the heartbeats of those on other hosts (torch_neuronx/distributed/peers.py)."""
from __future__ import annotations

import json

import pytest
from fault_worker import TIMEOUT
from launch import separate_hosts_available, torchrun, torchrun_nodes

LIMIT_S = TIMEOUT.total_seconds() + 5  # the group's timeout, not a hang


def fault(tmp_path, rank: int = 0) -> dict:
    return json.loads((tmp_path / f"fault{rank}.json").read_text())


@pytest.mark.parametrize("mode", ["between", "during"])
@pytest.mark.parametrize("shared_memory", ["1", "0"])
def test_a_killed_rank_makes_the_collective_raise_not_hang(tmp_path, mode, shared_memory):
    # torchrun stops the survivors once it sees a rank die: it looks later than the survivor's
    # collective can take (the group's timeout), so rank 0 records what it saw first (under load
    # the default 0.1 s interval killed it before it wrote its outcome).
    result = torchrun("fault_worker.py", 2, tmp_path, mode, timeout=120,
                      env={"TORCH_NEURONX_DIST_SHARED_MEMORY": shared_memory},
                      extra=(f"--monitor-interval={TIMEOUT.total_seconds() + 2:g}",))
    assert result.returncode != 0  # torchrun reports the rank that died
    outcome = fault(tmp_path)
    assert outcome["transport"] == ("shared_memory" if shared_memory == "1" else "gloo")
    assert "c10d::all_reduce" in outcome["outcome"], outcome["outcome"]
    assert "rank(s) 1 (pid" in outcome["outcome"] and "exited" in outcome["outcome"], outcome["outcome"]
    assert outcome["elapsed_s"] < LIMIT_S
    assert outcome["after"] == [0.0, 2.0, 4.0, 6.0]


def test_a_late_rank_times_the_collective_out_and_a_new_group_works(tmp_path):
    result = torchrun("fault_worker.py", 2, tmp_path, "late", timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    first, late = fault(tmp_path, 0), fault(tmp_path, 1)
    assert "c10d::all_reduce" in first["outcome"] and "waiting for rank(s) 1" in first["outcome"], first["outcome"]
    assert first["elapsed_s"] < LIMIT_S
    assert "c10d::all_reduce" in late["outcome"] and "broken" in late["outcome"], late["outcome"]
    for outcome in (first, late):
        assert outcome["new_group"] == [3.0] * 8
        assert outcome["after"] == [0.0, 2.0, 4.0, 6.0]


@pytest.mark.skipif(not separate_hosts_available(), reason="needs UTS namespaces (root) for a host name per node")
def test_a_rank_killed_on_another_host_is_named(tmp_path):
    """Two torchrun trees under their own host names (so the group uses Gloo, as between
    machines): rank 1 dies inside the collective, and rank 0 names it from its stopped heartbeat."""
    trees = torchrun_nodes("fault_worker.py", 2, 1, tmp_path, "during", timeout=120, hosts=["node-a", "node-b"],
                           until="fault0.json")
    assert trees[1][0] != 0  # the tree whose rank died
    outcome = fault(tmp_path)
    assert outcome["transport"] == "gloo"
    assert "c10d::all_reduce" in outcome["outcome"], outcome["outcome"]
    assert "rank(s) 1 (pid" in outcome["outcome"] and "on node-b) stopped responding" in outcome["outcome"], \
        outcome["outcome"]
    assert outcome["elapsed_s"] < LIMIT_S
    assert outcome["after"] == [0.0, 2.0, 4.0, 6.0]
