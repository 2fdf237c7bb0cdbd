"""A rank that dies makes the others' next collective raise, naming it, within the timeout; the
device stays usable (tests/distributed/fault_worker.py)."""
from __future__ import annotations

import json

from launch import torchrun


def test_a_killed_rank_makes_the_next_collective_raise_not_hang(tmp_path):
    result = torchrun("fault_worker.py", 2, tmp_path, timeout=120)
    assert result.returncode != 0  # torchrun reports the rank that died
    fault = json.loads((tmp_path / "fault.json").read_text())
    assert "c10d::allreduce" in fault["outcome"], fault["outcome"]
    assert fault["elapsed_s"] < 10 + 5  # the group's timeout, not a hang
    assert fault["after"] == [0.0, 2.0, 4.0, 6.0]
