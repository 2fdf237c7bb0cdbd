"""nki.collectives across the processes of a torch.distributed job: 2 real processes under torchrun
(tests/distributed/launch.py, loopback), launches of 1 and 2 programs each, on NumPy arrays
(nki.simulate_kernel) and on neuron tensors, against NumPy references computed from every rank's
inputs (tests/nki/collectives_processes_worker.py); a missing peer and mismatched program counts."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from nki.simulator.spmd import Launch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "distributed"))
from collectives_processes_worker import CHECKS  # noqa: E402
from launch import assert_check_ok, rank_results, torchrun  # noqa: E402


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("nki_collectives_processes")
    result = torchrun(str(HERE / "collectives_processes_worker.py"), 2, out, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    return rank_results(out, 2)


@pytest.mark.parametrize("name", list(CHECKS))
def test_two_processes(two_processes, name):
    assert_check_ok(two_processes, name)


def test_a_program_waiting_for_other_processes_lets_the_others_run():
    """Program 0 waits (outside the baton) for what program 1 does: the programs of the other
    processes may wait for it in turn."""
    launch, done = Launch(2), threading.Event()

    def body(index):
        if index == 0:
            return launch.outside(0, lambda failed: done.wait(5), "the wait")
        done.set()
        return "set"

    assert launch.run(body) == [True, "set"]


def test_a_failing_program_ends_a_wait_for_other_processes():
    launch = Launch(2)

    def wait(failed):
        deadline = time.monotonic() + 5
        while not failed() and time.monotonic() < deadline:
            time.sleep(0.001)
        return "not aborted"

    def body(index):
        if index == 0:
            return launch.outside(0, wait, "the wait")
        raise ValueError("program 1 fails")

    start = time.monotonic()
    with pytest.raises(ValueError, match="program 1 fails"):
        launch.run(body)
    assert time.monotonic() - start < 2
