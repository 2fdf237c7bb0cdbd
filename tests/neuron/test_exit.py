"""Interpreter exit with kernels still queued."""
import os
import subprocess
import sys
from pathlib import Path

import torch_neuronx

SCRIPT = """
import time, torch, torch_neuronx
x = torch.ones(4, device="neuron")

def kernel():  # a Python kernel (as compiled graphs and nki kernels are) still running at exit
    time.sleep(0.3)
    torch_neuronx._C._host_alias(x).add_(1)

torch_neuronx._C._launch_python_kernel(0, kernel, "test::slow_python_kernel", wait=False)
"""


def test_exit_waits_for_queued_python_kernels():
    root = str(Path(torch_neuronx.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
