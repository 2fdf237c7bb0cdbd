"""Host threads that wait for a core release their idle OpenMP threads (csrc/shim/device.cpp),
so that libgomp does not throttle the core worker's team. Thread counts, not timing, are checked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_neuronx
from helpers import run_py

SCRIPT = """
import os, time, torch, torch_neuronx
def threads():
    return len(os.listdir("/proc/self/task"))
torch.set_num_threads(2)
x = torch.randn(512, 512, device="neuron")
(x @ x).sum().item()  # the core's worker starts its OpenMP team
before = threads()
a = torch.randn(512, 512)
expected = (a @ a).sum()  # the main thread starts its own
with_host_team = threads()
{wait}
deadline = time.monotonic() + 5  # released threads exit on their own, soon after
while threads() > before and time.monotonic() < deadline:
    time.sleep(0.01)
after = threads()
y = a.to("neuron")
assert torch.allclose((y @ y).sum().cpu(), expected, rtol=1e-4)  # CPU ops still work after
torch.testing.assert_close((a @ a).sum(), expected)
print(before, with_host_team, after)
"""

WAITS = {
    "synchronize": "torch.neuron.synchronize()",
    "item": "(x @ x).sum().item()",  # still queued when read (a read of an idle core runs on the host, no wait)
    "stream": "torch.neuron.current_stream().synchronize()",
    "event": "e = torch.neuron.Event(); e.record(); e.synchronize()",
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
@pytest.mark.skipif(torch.get_num_threads() < 2 and os.cpu_count() < 2, reason="needs two threads")
@pytest.mark.parametrize("wait", sorted(WAITS))
def test_waiting_host_thread_releases_its_openmp_threads(wait):
    root = str(Path(torch_neuronx.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(wait=WAITS[wait])], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, with_host_team, after = map(int, done.stdout.split()[-3:])
    assert with_host_team > before  # the main thread's team exists...
    assert after == before  # ...and is gone once the main thread waited for the core


LAUNCHER_SETTINGS = """
import json, torch, torch_neuronx
torch.manual_seed(0)
x, w = torch.randn(4096, 1024), torch.randn(1024, 64)
xd, wd = x.to("neuron"), w.to("neuron")
threads = {}
for count in (1, 2, 1):
    torch.set_num_threads(count)
    total, product = xd.sum().cpu(), (xd[:64] @ wd).cpu()
    same = torch.equal(total, x.sum()) and torch.equal(product, x[:64] @ w)
    threads[count] = threads.get(count, True) and same
denormals = torch.tensor([1e-39, 3e-40, 1.0])
flush = {}
for on in (True, False, True, False):
    torch.set_flush_denormal(on)
    flush[on] = flush.get(on, True) and torch.equal((denormals.to("neuron") * 2).cpu(), denormals * 2)
print(json.dumps({"threads": threads, "flush": flush, "counts": torch_neuronx.runtime.kernel_counts()}))
"""


@pytest.fixture(scope="module")
def launcher_settings():
    """Kernels launched under a thread's CPU settings, every one run by the core's worker."""
    done = run_py(LAUNCHER_SETTINGS, TORCH_NEURONX_SIM_CONF="inline_kernels:0")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["counts"]["host"] == 0 and result["counts"]["worker"] > 0
    return result


@pytest.mark.skipif(os.cpu_count() < 2, reason="one thread count only")
def test_kernels_on_the_worker_compute_with_the_launching_threads_thread_count(launcher_settings):
    # A full sum and a small matmul round differently with one and two threads: the worker runs
    # them as the launching thread would on the CPU, bit for bit (the same CPU kernels).
    assert launcher_settings["threads"] == {"1": True, "2": True}


def test_kernels_on_the_worker_flush_denormals_as_the_launching_thread_does(launcher_settings):
    # torch.set_flush_denormal sets the calling thread's floating-point controls; the worker
    # takes the launching thread's, turned on and off again.
    assert launcher_settings["flush"] == {"true": True, "false": True}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads thread names in /proc")
def test_the_cores_worker_thread_is_named_after_its_core():
    torch.ones(1, device="neuron").add_(1).cpu()
    names = {Path(f"/proc/self/task/{tid}/comm").read_text().strip() for tid in os.listdir("/proc/self/task")}
    assert "neuron-core0" in names
