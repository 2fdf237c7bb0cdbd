"""On-disk cache of compiled executables.

An entry is the Python module Inductor generated for a graph (its C++ kernels are built into
shared objects under ``<cache dir>/inductor``, which Inductor finds again by the hash of their
source), keyed over the graph, its input and output specs, the torch version, the backend's own
source and Inductor's configuration. Entries are written atomically (temporary file, then
``os.replace``) under a per-key file lock, so concurrent processes compile a graph once; an entry
whose checksum or load fails is reported, recompiled and overwritten.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import filelock
import torch
from torch import fx

_FORMAT = "2"  # bump when the entry layout changes


@functools.cache
def _isa_probe() -> threading.Thread:
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list
    # The probe imports setuptools, whose import adds and removes a finder at the front of
    # sys.meta_path; another thread importing at that moment can skip the path finder and fail
    # with "No module named ...". So that import happens here, on the calling thread.
    import torch.utils.cpp_extension  # noqa: F401
    probe = threading.Thread(target=valid_vec_isa_list, name="torch_neuronx-isa-probe", daemon=True)
    probe.start()
    return probe


def start_isa_probe() -> None:
    """Inductor probes the host's vector instruction sets once per process (building and loading
    a test library per candidate in subprocesses, ~1.2 s) when it first builds or loads a kernel.
    Started when the backend is named, the probe waits on its subprocesses while Dynamo and
    AOTAutograd trace, instead of adding to a warm start."""
    _isa_probe()


def wait_isa_probe() -> None:
    """Before building or loading kernels: a probe still running finishes, rather than running
    twice."""
    _isa_probe().join()


@functools.cache
def backend_version() -> str:
    """A hash of this package's source: a change to the lowering invalidates entries."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _spec(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{list(value.shape)}{list(value.stride())}{value.device.type}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_spec(v) for v in value) + ")"
    return repr(value)


def _graph_lines(gm: fx.GraphModule) -> Iterator[str]:
    """Every node with its target, arguments and result spec, including subgraphs (e.g. a
    FlexAttention score_mod) and the bytes of tensor constants."""
    for name, module in gm.named_modules():
        if not isinstance(module, fx.GraphModule):
            continue
        yield f"module {name}"
        for node in module.graph.nodes:
            yield f"{node.op} {node.name} {node.target} {node.args} {node.kwargs} {_spec(node.meta.get('val'))}"
            value = functools.reduce(getattr, node.target.split("."), module) if node.op == "get_attr" else None
            if isinstance(value, torch.Tensor):
                yield value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes().hex()


def key(gm: fx.GraphModule, *context: str) -> str:
    """The entry of a graph; ``context``: what else its compilation depends on."""
    from torch._inductor import config as inductor_config
    digest = hashlib.sha256()
    for part in (_FORMAT, torch.__version__, backend_version(), inductor_config.get_hash().hex(),
                 *context, *_graph_lines(gm)):
        digest.update(part.encode() + b"\n")
    return digest.hexdigest()


@contextlib.contextmanager
def inductor_dir(root: Path | None) -> Iterator[None]:
    """Point Inductor's own caches (generated modules, built kernels) at ``root/inductor`` while
    the backend compiles or loads, so warm entries find their kernels; CPU compilation keeps its
    directory. ``None``: Inductor's caches as they are, without its FX graph cache."""
    from torch._inductor import config as inductor_config
    if root is None:
        with inductor_config.patch(fx_graph_cache=False):
            yield
        return
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TORCHINDUCTOR_CACHE_DIR"]
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


def _entry(root: Path, digest: str) -> Path:
    return root / digest[:2] / f"{digest}.py"


def lock(root: Path, digest: str) -> filelock.FileLock:
    """Held while a process looks up, compiles and stores one key."""
    path = root / "locks" / f"{digest}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(path))


def _checksum(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def load(root: Path, digest: str) -> tuple[Callable[[list[Any]], Any], int] | None:
    """The cached executable's entry function and seed count, or None (a miss, or a corrupt
    entry: warned)."""
    from torch._inductor.codecache import PyCodeCache
    path = _entry(root, digest)
    if not path.exists():
        return None
    wait_isa_probe()
    try:
        header, source = path.read_text().split("\n", 1)
        checksum, seeds = header.removeprefix("# sha256 ").split(" seeds ")
        if checksum != _checksum(source):
            raise ValueError("checksum mismatch")
        return PyCodeCache.load(source).call, int(seeds)
    except Exception as error:  # any damage: the entry is rebuilt, never fatal
        warnings.warn(f"torch.compile(backend='neuron'): cache entry {path} is corrupt ({error}); "
                      "recompiling the graph and overwriting it.", stacklevel=2)
        return None


def store(root: Path, digest: str, source: str, seeds: int) -> None:
    """Write the generated module and the number of random seeds its entry function takes."""
    path = _entry(root, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(f"# sha256 {_checksum(source)} seeds {seeds}\n{source}")
    os.replace(tmp.name, path)
