"""PyTorch's own distributed test suite (``DistributedTest._DistTestBase``, shipped in the torch
wheel, the suite ``test/distributed/test_distributed_spawn.py`` runs per backend) on the ``neuron``
process-group backend, as that file instantiates it for Gloo: ``BACKEND=neuron``, each test in
``WORLD_SIZE`` spawned processes. Run by tests/upstream/test_distributed_suite.py (slow); by hand:

    python tests/upstream/distributed_suite.py --json results.json [-k PATTERN ...]

The suite picks devices by backend name: its NCCL branches put tensors on CUDA, every other
backend's tensors are CPU tensors, which the neuron process group moves through Gloo, and models
that DDP wraps stay on the CPU unless a test moves them. ``neuron`` joins the suite's own feature
sets for DDP and subgroups (``DistTestCases.backend_feature``, the sets HPU and XPU join upstream);
nothing else in the suite is changed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import unittest

WORLD_SIZE = "2"


def _environment() -> None:
    """What test_distributed_spawn.py's launcher sets before the suite is imported."""
    os.environ.setdefault("BACKEND", "neuron")
    os.environ.setdefault("WORLD_SIZE", WORLD_SIZE)
    if "TEMP_DIR" not in os.environ:
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="neuron-dist-suite-")
    for sub in ("barrier", "test_dir", "init_dir"):
        os.makedirs(os.path.join(os.environ["TEMP_DIR"], sub), exist_ok=True)


_environment()

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

import torch_neuronx  # noqa: E402,F401  (registers the neuron backend in each spawned process too)

for _feature in ("ddp", "subgroup"):
    DistTestCases.backend_feature[_feature].add("neuron")

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestNeuronBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """test_distributed_spawn.py's TestDistBackendWithSpawn, for ``BACKEND=neuron``."""

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()


class _Recorder(unittest.TextTestResult):
    """Each test's outcome ("pass", "fail", "error", "skip") and message."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, dict[str, object]] = {}
        self._started = 0.0

    def startTest(self, test) -> None:
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome: str, message: str = "") -> None:
        self.outcomes[test.id().rsplit(".", 1)[-1]] = {
            "outcome": outcome, "message": message[-2000:], "seconds": round(time.monotonic() - self._started, 2)}

    def addSuccess(self, test) -> None:
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err) -> None:
        super().addFailure(test, err)
        self._record(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err) -> None:
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason) -> None:
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addExpectedFailure(self, test, err) -> None:
        super().addExpectedFailure(test, err)
        self._record(test, "pass", "expected failure")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="where to write {test: {outcome, message, seconds}}")
    parser.add_argument("-k", action="append", default=[], help="run only tests whose name contains it")
    args = parser.parse_args(argv)
    names = sorted(n for n in unittest.TestLoader().getTestCaseNames(TestNeuronBackendWithSpawn)
                   if not args.k or any(k in n for k in args.k))
    suite = unittest.TestSuite(TestNeuronBackendWithSpawn(n) for n in names)
    result = unittest.TextTestRunner(resultclass=_Recorder, verbosity=1, stream=sys.stderr).run(suite)
    with open(args.json, "w") as f:
        json.dump({"world_size": int(os.environ["WORLD_SIZE"]), "tests": result.outcomes}, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
