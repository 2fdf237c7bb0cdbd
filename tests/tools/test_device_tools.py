"""neuron-ls and neuron-top, run as a user runs them (their console scripts, in another process)
while a script uses the device: they show the script's cores and the memory it reports itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
USER_SCRIPT = """
import sys, time, torch
from pathlib import Path
out = Path(sys.argv[1])
torch.neuron.set_device(1)
x = torch.ones(1 << 20, device="neuron")      # 4 MiB on neuron:1
y = (x * 2).sum()
torch.neuron.synchronize()
out.joinpath("ready.json").write_text(__import__("json").dumps(
    {"allocated": torch.neuron.memory_allocated(1), "reserved": torch.neuron.memory_reserved(1)}))
while not out.joinpath("stop").exists():
    time.sleep(0.05)
"""


@pytest.fixture
def activity_dir(tmp_path, monkeypatch):
    """Processes of this test publish to, and the tools read from, a directory of its own."""
    folder = tmp_path / "activity"
    monkeypatch.setenv("TORCH_NEURONX_ACTIVITY_DIR", str(folder))
    return folder


@pytest.fixture
def user_process(tmp_path, activity_dir):
    process = subprocess.Popen([sys.executable, "-c", USER_SCRIPT, str(tmp_path)], env=os.environ.copy())
    ready = tmp_path / "ready.json"
    deadline = time.monotonic() + 60
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the user script did not start"
    time.sleep(1.2)  # two publishing periods
    yield process, json.loads(ready.read_text())
    (tmp_path / "stop").touch()
    process.wait(timeout=60)


def tool(name: str, *args: str) -> str:
    done = subprocess.run([str(BIN / name), *args], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_neuron_ls_lists_every_core_and_the_memory_a_process_uses(user_process):
    process, reported = user_process
    rows = json.loads(tool("neuron-ls", "--json"))
    assert [r["core"] for r in rows] == list(range(4))  # one trn2 chip, 4 logical cores by default
    assert {r["generation"] for r in rows} == {"trn2"} and {r["capacity"] for r in rows} == {24 << 30}
    # Other processes of this machine (this test's own) may use cores too: the script's share is
    # on core 1 alone.
    assert [r["core"] for r in rows if process.pid in r["pids"]] == [1]
    assert rows[1]["reserved"] >= reported["reserved"] > 0
    table = tool("neuron-ls")
    assert str(process.pid) in table.splitlines()[2]  # the row of core 1


def test_neuron_top_snapshot_names_the_process_its_cores_and_memory(user_process):
    process, reported = user_process
    snapshot = json.loads(tool("neuron-top", "--once", "--json"))
    (record,) = [r for r in snapshot["processes"] if r["pid"] == process.pid]
    assert "-c" in record["command"]
    (core,) = record["cores"]
    assert (core["device"], core["core"]) == (1, 1)
    assert core["allocated"] == reported["allocated"] and core["peak"] >= reported["allocated"]
    assert core["kernels"] >= 2 and core["pending"] == 0


def test_neuron_top_live_view_refreshes(user_process):
    process, _ = user_process
    screen = tool("neuron-top", "--iterations", "2", "--interval", "0.2")
    assert screen.count("\x1b[H\x1b[2J") == 2  # cleared and redrawn twice
    assert "process(es)" in screen and "cores in use" in screen
    assert f"{process.pid:>7}  1 " in screen  # its row: pid, then its core


def test_a_finished_process_disappears_from_the_view(tmp_path, activity_dir):
    subprocess.run([sys.executable, "-c", "import torch; torch.ones(4, device='neuron').sum().item(); "
                    "import time; time.sleep(1.2)"], check=True, timeout=120, env=os.environ.copy())
    assert list(activity_dir.glob("*.json")) == []  # removed at exit (this test's process uses no core)
    # A process killed before it could remove its file is dropped by the next reader.
    killed = subprocess.Popen([sys.executable, "-c", "import torch, time; torch.ones(4, device='neuron').sum(); "
                               "time.sleep(60)"], env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not list(activity_dir.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    killed.kill()
    killed.wait()
    processes = json.loads(tool("neuron-top", "--once", "--json"))["processes"]
    assert killed.pid not in [r["pid"] for r in processes]
    assert not activity_dir.joinpath(f"{killed.pid}.json").exists()
