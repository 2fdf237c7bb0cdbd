"""The on-disk executable cache: warm starts in fresh processes, concurrency, corrupt entries."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_neuronx

REPO_ROOT = str(Path(torch_neuronx.__file__).resolve().parent.parent)

# A fresh process compiling a forward and a backward graph; prints the backend's metrics.
CHILD = """
import json, torch, torch_neuronx
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2)).to("neuron")
loss = torch.compile(model, backend="neuron")(torch.randn(4, 8, device="neuron")).square().sum()
loss.backward()
print(json.dumps({"loss": loss.item(), **torch_neuronx.get_dynamo_metrics()}))
"""


def child_env(cache_dir: Path) -> dict[str, str]:
    """A clean environment: only what the child needs, the cache under test."""
    return {"PATH": os.environ["PATH"], "HOME": str(cache_dir.parent), "PYTHONPATH": REPO_ROOT,
            "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache_dir)}


def start_child(cache_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD], env=child_env(cache_dir), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(child: subprocess.Popen) -> dict:
    out, err = child.communicate(timeout=600)
    assert child.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_fresh_process_with_a_warm_cache_skips_compilation(tmp_path):
    cold = finish(start_child(tmp_path / "cache"))
    warm = finish(start_child(tmp_path / "cache"))
    assert (cold["executables_compiled"], cold["cache_misses"], cold["cache_hits"]) == (2, 2, 0)
    assert (warm["executables_compiled"], warm["cache_misses"], warm["cache_hits"]) == (0, 0, 2)
    assert "compiler" not in warm["compile_time_s"]
    assert warm["loss"] == cold["loss"]


@pytest.mark.slow
def test_concurrent_cold_processes_compile_each_graph_once(tmp_path):
    children = [start_child(tmp_path / "cache") for _ in range(2)]
    results = [finish(child) for child in children]
    # The per-key lock makes the later process wait for the entry and load it.
    assert sum(r["executables_compiled"] for r in results) == 2
    assert sum(r["cache_hits"] for r in results) == 2
    assert results[0]["loss"] == results[1]["loss"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    yield tmp_path / "cache"
    torch._dynamo.reset()


def scaled_sin(x: torch.Tensor) -> torch.Tensor:
    return x.sin() * 2 + 1


def run_compiled(x: torch.Tensor) -> torch.Tensor:
    torch._dynamo.reset()
    return torch.compile(scaled_sin, backend="neuron")(x.to("neuron")).cpu()


def entries(cache_dir: Path) -> list[Path]:
    return list(cache_dir.glob("??/*.py"))


def test_a_corrupt_entry_warns_recompiles_and_is_overwritten(cache_dir):
    x = torch.randn(64)
    run_compiled(x)
    (entry,) = entries(cache_dir)
    good = entry.read_text()
    entry.write_text(good[: len(good) // 2])  # a truncated write
    with pytest.warns(UserWarning, match="corrupt"):
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    assert entry.read_text() == good
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["executables_compiled"], metrics["cache_hits"]) == (2, 1)


def test_an_entry_is_keyed_by_input_specs(cache_dir):
    run_compiled(torch.randn(64))
    run_compiled(torch.randn(64, dtype=torch.float64))
    run_compiled(torch.randn(64))
    assert len(entries(cache_dir)) == 2
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["cache_misses"], metrics["cache_hits"]) == (2, 1)


def test_disabling_the_cache_compiles_every_time_and_writes_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    x = torch.randn(64)
    for _ in range(2):
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["executables_compiled"], metrics["cache_hits"], metrics["cache_misses"]) == (2, 0, 0)
    assert not cache_dir.exists()


def test_inductor_keeps_its_own_cache_directory_for_cpu_compiles(cache_dir):
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    run_compiled(torch.randn(64))
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before
    assert any((cache_dir / "inductor").iterdir())  # the neuron kernels were built in ours
