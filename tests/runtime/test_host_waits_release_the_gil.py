"""A host thread that waits for its core releases the interpreter lock: the core's queue may hold
Python kernels (compiled graphs, kernel-language ops, collectives) that need it to run. Each case
deadlocked before (a full queue, a storage resize, an event wait); run in a subprocess with a
timeout so a regression fails instead of hanging the suite."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import torch_neuronx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torch_neuronx.__file__)))

PRELUDE = """
import time, torch, torch_neuronx
from torch_neuronx import _C
x = torch.zeros(1024, device="neuron")
def python_kernel():
    time.sleep(0.05)  # the worker holds the lock only while it runs Python
    sum(range(1000))
_C._launch_python_kernel(0, python_kernel, "python kernel", wait=False)
"""

CASES = {
    # the queue (depth 4 below) fills while the Python kernel waits for the lock
    "full queue": "for _ in range(32):\n    x.add_(1)\nprint(x[0].item())",
    # events recorded and waited on also take a place in the queue (a loop of collectives)
    "full queue of event records": "for _ in range(32):\n    torch.neuron.current_stream().record_event()\n"
                                   "torch.neuron.synchronize()\nprint('synchronized')",
    "full queue of event waits": "s = torch.neuron.Stream()\ne = s.record_event()\nfor _ in range(32):\n"
                                 "    torch.neuron.current_stream().wait_event(e)\n"
                                 "torch.neuron.synchronize()\nprint('synchronized')",
    "storage resize": "x.untyped_storage().resize_(8192)\nprint(x.untyped_storage().nbytes())",
    "event wait": "e = torch.neuron.Event()\ne.record()\ne.synchronize()\nprint('synchronized')",
    "stream wait": "torch.neuron.current_stream().synchronize()\nprint('synchronized')",
}


@pytest.mark.parametrize("case", list(CASES))
def test_waiting_for_a_queued_python_kernel_does_not_deadlock(case):
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TORCH_NEURONX_SIM_CONF": "max_inflight_kernels:4"}
    result = subprocess.run([sys.executable, "-c", PRELUDE + CASES[case]], env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] in {"32.0", "8192", "synchronized"}
