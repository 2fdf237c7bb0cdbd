"""The slowest rank of each collective: two real ranks under torchrun (a ``neuron`` process group
on loopback), each writing its own profile; the Explorer joins them and names the rank the
others waited for."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import free_port
from torch_neuronx.explorer.server import Profiles

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def rank_profiles(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
         f"--master_port={free_port()}", str(HERE / "ranks_worker.py")],
        env={**os.environ, "RESULTS_DIR": str(out), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "profiles"


def test_each_collective_names_the_rank_the_others_waited_for(rank_profiles):
    profiles = Profiles(rank_profiles)
    assert len(profiles.paths) == 2
    by_rank = {profiles.get(k).meta["rank"]: k for k in profiles.paths}
    assert set(by_rank) == {0, 1} and all(profiles.get(k).meta["world_size"] == 2 for k in profiles.paths)
    rows = profiles.get(by_rank[0]).collectives(profiles.peers(by_rank[0]))
    assert [r["index"] for r in rows] == [0, 1, 2]
    slow = rows[1]
    assert slow["slowest_rank"] == 1 and set(slow["arrivals_ns"]) == {"0", "1"}
    assert slow["waited_ns"] >= 150e6  # rank 1 slept 0.2 s before it
    # The other collectives had no such wait (the ranks arrive within the launch noise).
    assert all(r["waited_ns"] < 100e6 for r in (rows[0], rows[2]))
    # From rank 1's side it waited for nobody on the slow one.
    [mine] = [r for r in profiles.get(by_rank[1]).collectives(profiles.peers(by_rank[1])) if r["index"] == 1]
    assert mine["slowest_rank"] == 1 and mine["waited_ns"] == 0
