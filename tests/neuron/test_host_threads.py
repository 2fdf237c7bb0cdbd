"""Host threads that wait for a core release their idle OpenMP threads (csrc/shim/device.cpp),
so that libgomp does not throttle the core worker's team. Thread counts, not timing, are checked."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_neuronx

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
