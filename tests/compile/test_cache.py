"""The on-disk executable cache: warm starts in fresh processes, concurrency, corrupt entries."""
import json
import os
import subprocess
import sys
import threading
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
grads = [p.grad.cpu().flatten().tolist() for p in model.parameters()]
print(json.dumps({"loss": loss.item(), "grads": grads, **torch_neuronx.get_dynamo_metrics()}))
"""


def child_env(cache_dir: Path) -> dict[str, str]:
    """A clean environment: only what the child needs, the cache under test and Inductor's
    cache directory beside it."""
    return {"PATH": os.environ["PATH"], "HOME": str(cache_dir.parent), "PYTHONPATH": REPO_ROOT,
            "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache_dir),
            "TORCHINDUCTOR_CACHE_DIR": str(cache_dir.parent / "inductor")}


def start_child(cache_dir: Path, script: str = CHILD, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], env={**child_env(cache_dir), **env}, text=True,
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
    # The graph's forward/backward partition came from AOTAutograd's cache: nothing traced.
    assert (cold["graph_cache_hits"], warm["graph_cache_hits"]) == (0, 1)
    assert "compiler" not in warm["compile_time_s"] and "lowering" not in warm["compile_time_s"]
    assert (warm["loss"], warm["grads"]) == (cold["loss"], cold["grads"])
    # The kernels' libraries are Inductor's, in its own cache directory (the cold child loaded none before).
    assert any((tmp_path / "inductor").rglob("*.so"))
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_a_cache_filled_for_another_vector_instruction_set_is_not_used(tmp_path):
    """Inductor's kernels hard-code the vector width they were generated for: code generated
    without vectors (``ATEN_CPU_CAPABILITY=default``) or for AVX2, built for AVX-512, reads and
    writes past its buffers. A process whose instruction set differs compiles its own graphs
    (neither the executable cache nor AOTAutograd's cache hits) and gets the same results."""
    vector = finish(start_child(tmp_path / "cache"))
    scalar = finish(start_child(tmp_path / "cache", ATEN_CPU_CAPABILITY="default"))
    assert (scalar["executables_compiled"], scalar["cache_hits"], scalar["graph_cache_hits"]) == (2, 0, 0)

    def values(child: dict) -> torch.Tensor:  # float32, as computed: vectorized or not, rounded differently
        return torch.tensor([child["loss"], *(g for grad in child["grads"] for g in grad)])
    torch.testing.assert_close(values(scalar), values(vector))


# Records the modules that threads other than the main thread import.
IMPORT_TRACER = """
import importlib.abc, sys, threading
OFF_MAIN = []
class Tracer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if threading.current_thread() is not threading.main_thread():
            OFF_MAIN.append(threading.current_thread().name + ": " + name)
sys.meta_path.insert(0, Tracer())
"""


def test_a_cold_compile_imports_nothing_off_the_main_thread(tmp_path):
    # Importing setuptools (Inductor's ISA probe needs it) adds and removes a finder at the front
    # of sys.meta_path; a thread importing at that moment skips the path finder and fails with
    # "No module named ...". The backend's threads must leave imports to the main thread.
    off_main = finish(start_child(tmp_path / "cache", IMPORT_TRACER + CHILD + "print(json.dumps(OFF_MAIN))"))
    assert off_main == []


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
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
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


def without_aot_id(entry: str) -> list[str]:
    return [line for line in entry.splitlines()[1:] if not line.startswith("# AOT ID")]


def test_a_corrupt_entry_warns_recompiles_and_is_overwritten(cache_dir):
    x = torch.randn(64)
    run_compiled(x)
    (entry,) = entries(cache_dir)
    good = entry.read_text()
    entry.write_text(good[: len(good) // 2])  # a truncated write
    with pytest.warns(UserWarning, match="corrupt"):
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    # The same code again; only the header naming AOTAutograd's graph counter differs.
    assert without_aot_id(entry.read_text()) == without_aot_id(good)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["executables_compiled"], metrics["cache_hits"]) == (2, 1)


def graph_entries(cache_dir: Path) -> list[Path]:
    """AOTAutograd's entries (a graph's partition and wrappers, naming its executables), in
    Inductor's cache directory, which the fixtures put beside the executable cache."""
    return list((cache_dir.parent / "inductor" / "aotautograd").glob("*/*"))


def test_a_graph_loads_with_its_executables_from_the_cache(cache_dir):
    x = torch.randn(64)
    run_compiled(x)
    assert len(graph_entries(cache_dir)) == 1
    torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["graph_cache_hits"], metrics["executables_compiled"], metrics["cache_hits"]) == (1, 1, 1)


def test_a_corrupt_graph_entry_is_skipped_and_the_graph_compiled_again(cache_dir):
    x = torch.randn(64)
    run_compiled(x)
    (entry,) = graph_entries(cache_dir)
    entry.write_bytes(entry.read_bytes()[:100])
    torch.testing.assert_close(run_compiled(x), scaled_sin(x))  # AOTAutograd logs a warning
    metrics = torch_neuronx.get_dynamo_metrics()
    # Traced again, its executable found in the executable cache; the graph saved anew.
    assert (metrics["graph_cache_hits"], metrics["executables_compiled"], metrics["cache_hits"]) == (0, 1, 1)
    torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    assert torch_neuronx.get_dynamo_metrics()["graph_cache_hits"] == 1


def test_a_graph_entry_whose_executable_is_gone_compiles_again(cache_dir):
    x = torch.randn(64)
    run_compiled(x)
    for entry in entries(cache_dir):
        entry.unlink()
    torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["graph_cache_hits"], metrics["executables_compiled"]) == (0, 2)
    assert len(entries(cache_dir)) == 1


def test_graph_entries_are_keyed_by_the_backend_source(cache_dir, monkeypatch):
    from torch_neuronx.compile import cache
    x = torch.randn(64)
    run_compiled(x)
    monkeypatch.setattr(cache, "backend_version", lambda: "another backend")
    torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    assert torch_neuronx.get_dynamo_metrics()["graph_cache_hits"] == 0
    assert len(graph_entries(cache_dir)) == 2


def test_pytorchs_autograd_cache_switch_leaves_the_executable_cache(cache_dir):
    x = torch.randn(64)
    with torch._functorch.config.patch(enable_autograd_cache=False):
        for _ in range(2):
            torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["graph_cache_hits"], metrics["executables_compiled"], metrics["cache_hits"]) == (0, 1, 1)
    assert graph_entries(cache_dir) == []


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


def test_a_compile_leaves_inductors_cache_setting_alone_for_other_threads(cache_dir):
    # A CPU compile in another thread reads TORCHINDUCTOR_CACHE_DIR whenever it builds or looks
    # up a kernel: the neuron backend must never change it, not even for the length of its call.
    seen, done = set(), threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.add(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        x = torch.randn(64)
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    finally:
        done.set()
        poller.join()
    assert seen == {str(cache_dir.parent / "inductor")}


def test_the_cache_is_created_private(cache_dir):
    run_compiled(torch.randn(64))
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    for path in entries(cache_dir):
        assert path.stat().st_mode & 0o077 == 0, path
    for directory in (p for p in cache_dir.rglob("*") if p.is_dir()):
        assert directory.stat().st_mode & 0o777 == 0o700, directory


@pytest.mark.parametrize("problem", ["group-writable", "world-writable", "another owner"])
def test_a_cache_others_could_write_is_refused_and_compilation_goes_on(cache_dir, problem):
    cache_dir.mkdir(mode=0o700)
    if problem == "another owner":
        if os.getuid() != 0:
            pytest.skip("giving the directory to another user needs root")
        os.chown(cache_dir, 65534, 65534)
    else:
        cache_dir.chmod(0o770 if problem == "group-writable" else 0o707)
    from torch_neuronx.compile import cache
    cache._refused.discard(cache_dir)
    x = torch.randn(64)
    with pytest.warns(UserWarning,
                      match=r"not using the compile cache .*(owned by uid 65534|writable by group or others)"):
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    assert list(cache_dir.iterdir()) == []
    metrics = torch_neuronx.get_dynamo_metrics()
    assert (metrics["executables_compiled"], metrics["cache_hits"], metrics["cache_misses"]) == (1, 0, 0)
    cache._refused.discard(cache_dir)


def test_a_tampered_entry_is_deleted_and_never_executed(cache_dir, tmp_path):
    x = torch.randn(64)
    run_compiled(x)
    (entry,) = entries(cache_dir)
    marker = tmp_path / "executed"
    header, source = entry.read_text().split("\n", 1)
    entry.write_text(f"{header}\nopen({str(marker)!r}, 'w').write('pwned')\n{source}")  # checksum kept
    with pytest.warns(UserWarning, match="corrupt or was modified.*deleted it"):
        torch.testing.assert_close(run_compiled(x), scaled_sin(x))
    assert not marker.exists()
    assert "pwned" not in entry.read_text()  # compiled again and stored anew


def _assert_changes_the_backend_version(monkeypatch, target, name: str, value) -> None:
    """The backend version differs while ``target.name`` is ``value``, and is itself again after."""
    from torch_neuronx.compile import cache
    before = cache.backend_version()
    monkeypatch.setattr(target, name, value)
    cache.backend_version.cache_clear()
    try:
        assert cache.backend_version() != before
    finally:
        monkeypatch.undo()
        cache.backend_version.cache_clear()
    assert cache.backend_version() == before


def test_the_key_includes_the_build_of_the_extension(monkeypatch):
    from torch_neuronx import _C
    from torch_neuronx.compile import cache
    real_hash = cache._file_hash
    _assert_changes_the_backend_version(
        monkeypatch, cache, "_file_hash", lambda p: "rebuilt" if Path(p) == Path(_C.__file__) else real_hash(p))


def test_the_key_includes_the_adaptive_segment_compiler(monkeypatch):
    """A fused segment's code comes from torch_neuronx/adaptive/kernel_source.py (its Inductor
    settings, and the replay it compiles): a changed compiler must not load segments the old one
    cached."""
    from torch_neuronx.adaptive import kernel_source
    compiler_source = Path(kernel_source.__file__).resolve()
    real_read = Path.read_bytes
    _assert_changes_the_backend_version(
        monkeypatch, Path, "read_bytes", lambda p: b"changed" if p.resolve() == compiler_source else real_read(p))


# Inductor's vector ISA probe in a fresh process: with the backend's probe (the candidates'
# checks side by side when their libraries are not built) or Inductor's own, one after the other.
ISA_PROBE = """
import json, sys, torch.utils.cpp_extension
from torch._inductor import cpu_vec_isa
from torch_neuronx.compile import cache
candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list
              if all(flag in cpu_vec_isa.x86_isa_checker() for flag in str(isa).split())]
built = [cache._isa_check_built(isa) for isa in candidates]
if sys.argv[1] == "backend":
    cache._probe_isas()
print(json.dumps({"built": built, "isas": [[str(i), i.build_arch_flags()] for i in cpu_vec_isa.valid_vec_isa_list()]}))
"""


def test_the_isa_probe_finds_what_inductors_own_probe_finds(tmp_path):
    env = child_env(tmp_path / "cache")
    backend, inductor = (
        json.loads(subprocess.run([sys.executable, "-c", ISA_PROBE, probe], env=env, text=True, capture_output=True,
                                  check=True).stdout)
        for probe in ("backend", "inductor"))
    assert backend["isas"] == inductor["isas"]
    # The first process found nothing built (and checked side by side), the second all of it.
    assert not any(backend["built"]) and all(inductor["built"])
