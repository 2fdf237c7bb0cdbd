"""On-disk cache of compiled executables.

An entry is the Python module Inductor generated for a graph, keyed over the graph, its input
and output specs, the torch and package versions, the build of the C++ extension, the backend's
lowering source and Inductor's configuration. Entries are written atomically (temporary file,
then ``os.replace``) under a per-key file lock, so concurrent processes compile a graph once.

Loading an entry executes code, so the cache must not be writable by anyone else: its directory
is created private (0700, files 0600), and a directory owned by another user or writable by
group or others is refused with a warning (compilation goes on without the cache). An entry
whose checksum does not match is deleted with a warning before anything runs, and compiled
again.

Inductor's own files (the C++ kernel libraries an entry loads, its FX graph cache, AOTAutograd's
graph entries) stay in Inductor's cache directory exactly as for a CPU ``torch.compile``
(``TORCHINDUCTOR_CACHE_DIR``, default ``/tmp/torchinductor_<user>``), under Inductor's rules:
the backend changes no process-wide setting that a concurrent CPU compile reads.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import filelock
import torch
from torch import fx

from .generated_module import load_module

_FORMAT = "3"  # bump when the entry layout changes


@functools.cache
def _isa_probe() -> threading.Thread:
    # The probe imports setuptools, whose import adds and removes a finder at the front of
    # sys.meta_path; another thread importing at that moment can skip the path finder and fail
    # with "No module named ...". So the probe's imports happen here, on the calling thread.
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.cpu_vec_isa  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    probe = threading.Thread(target=_probe_isas, name="torch_neuronx-isa-probe", daemon=True)
    probe.start()
    return probe


def _probe_isas() -> None:
    """Inductor's ``valid_vec_isa_list``. It checks its candidates one after the other, each by
    building a test library (kept in Inductor's cache) and loading it in a subprocess. When the
    libraries are not built yet (on x86 with AVX-512: six ``g++`` runs, ~7 s of one core) the
    candidates are checked side by side first; each check is cached on its candidate. When they
    are, the loads (~1.2 s) run one after the other: in parallel they only take the cores from
    Dynamo's tracing, which lasts longer than they do."""
    from torch._inductor import cpu_vec_isa
    cpu_flags = cpu_vec_isa.x86_isa_checker()
    candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list
                  if cpu_flags and all(flag in cpu_flags for flag in str(isa).split())]
    if len(candidates) > 1 and not _isa_check_built(candidates[0]):
        with ThreadPoolExecutor(min(len(candidates), os.cpu_count() or 1)) as pool:
            list(pool.map(bool, candidates))
    cpu_vec_isa.valid_vec_isa_list()


def _isa_check_built(isa: Any) -> bool:
    """Whether Inductor's cache has the test library of ``isa``'s check (named, and its source
    written, as ``VecISA.check_build`` does)."""
    from torch._inductor import codecache, cpu_vec_isa
    _, source = codecache.write(cpu_vec_isa.VecISA._avx_code, "cpp",
                                extra=cpu_vec_isa._get_isa_dry_compile_fingerprint(isa.build_arch_flags()))
    return Path(source).with_suffix(".so").exists()


def start_isa_probe() -> None:
    """Inductor probes the host's vector instruction sets once per process, when it first builds
    or loads a kernel (:func:`_probe_isas`). Started when the backend is named, the probe runs
    while Dynamo and AOTAutograd trace instead of adding to the compile."""
    _isa_probe()


def wait_isa_probe() -> None:
    """Before building or loading kernels: a probe still running finishes, rather than running
    twice."""
    _isa_probe().join()


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.cache
def backend_version() -> str:
    """What the generated code depends on besides the graph: the package version, the build of
    the C++ extension (a rebuilt shim invalidates entries) and the compile, lowering and
    adaptive-segment source (adaptive/ replays and compiles the segments it caches)."""
    from .. import _C
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(importlib.metadata.version("torch-neuronx-sim").encode())
    digest.update(_file_hash(Path(_C.__file__)).encode())
    for path in sorted([*package.glob("compile/*.py"), *package.glob("ops/*.py"), *package.glob("adaptive/*.py")]):
        digest.update(path.read_bytes())
    return digest.hexdigest()


_refused: set[Path] = set()


def usable_root(root: Path) -> Path | None:
    """``root``, created private if it does not exist; None, warned once, when another user could
    write to it (owned by someone else, or group/world-writable): loading entries runs code."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.stat()
    except OSError as error:
        problem = f"it cannot be created ({error})"
    else:
        if info.st_uid != os.getuid():
            problem = f"it is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problem = f"it is writable by group or others (mode {stat.filemode(info.st_mode)})"
        else:
            return root
    if root not in _refused:
        _refused.add(root)
        warnings.warn(f"torch.compile(backend='neuron'): not using the compile cache {root}: {problem}, "
                      "and loading an entry executes its code. Compiling without the cache; make the "
                      f"directory yours and private (chmod 700 {root}) or set TORCH_NEURONX_NEFF_CACHE_DIR "
                      "to a private directory.", stacklevel=3)
    return None


def _spec(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{list(value.shape)}{list(value.stride())}{value.device.type}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_spec(v) for v in value) + ")"
    return repr(value)


def _constant_bytes(value: torch.Tensor) -> str:
    # A constant is a real tensor (torch.tensor([...], device=x.device) in a forward), and the
    # key is computed inside AOTAutograd's fake mode, which would refuse to read it.
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()


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
                yield _constant_bytes(value)


def key(gm: fx.GraphModule, *context: str) -> str:
    """The entry of a graph; ``context``: what else its compilation depends on."""
    from torch._inductor import config as inductor_config
    digest = hashlib.sha256()
    for part in (_FORMAT, torch.__version__, backend_version(), vector_isa(), inductor_config.get_hash().hex(),
                 *context, *_graph_lines(gm)):
        digest.update(part.encode() + b"\n")
    return digest.hexdigest()


def vector_isa() -> str:
    """The vector instruction set Inductor generates CPU kernels for in this process: the host's
    widest, or the one ``ATEN_CPU_CAPABILITY`` (or Inductor's ``cpp.simdlen``) names. Generated
    code hard-codes its vector width, and a kernel generated for AVX2 and built for AVX-512 (a cache
    filled under another setting, or on another machine) reads and writes past its buffers; so
    every key of generated code includes it. Neither Inductor's own FX graph cache key nor
    AOTAutograd's does (torch 2.13): the backend tags them with it (:func:`inductor_caches`)."""
    wait_isa_probe()
    from torch._inductor.cpu_vec_isa import pick_vec_isa
    return str(pick_vec_isa()) or "none"


@contextlib.contextmanager
def inductor_caches(root: Path | None) -> Iterator[None]:
    """Around the backend's calls into Inductor: with the executable cache disabled (``root``
    None), Inductor's FX graph cache is off for neuron graphs too, so nothing compiled for the
    device is reused; otherwise Inductor's and AOTAutograd's caches as they are. Their keys are
    tagged with this backend's source and the vector instruction set (``cache_key_tag``, appended
    to any tag of the user's; once when entered again)."""
    from torch._inductor import config as inductor_config
    ours = f"|torch_neuronx {backend_version()} {vector_isa()}"
    tag = torch.compiler.config.cache_key_tag
    with torch.compiler.config.patch(cache_key_tag=tag if tag.endswith(ours) else tag + ours), \
            inductor_config.patch(fx_graph_cache=False) if root is None else contextlib.nullcontext():
        yield


def _entry(root: Path, digest: str) -> Path:
    return root / digest[:2] / f"{digest}.py"


def lock(root: Path, digest: str) -> filelock.FileLock:
    """Held while a process looks up, compiles and stores one key."""
    path = root / "locks" / f"{digest}.lock"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    return filelock.FileLock(str(path), mode=0o600)


def _checksum(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def load(root: Path, digest: str) -> tuple[Callable[[list[Any]], Any], int] | None:
    """The cached executable's entry function and seed count, or None (a miss, or a corrupt
    entry: warned)."""
    entry = load_with_source(root, digest)
    return None if entry is None else entry[1:]


def load_with_source(root: Path, digest: str) -> tuple[str, Callable[[list[Any]], Any], int] | None:
    """The cached generated module's source (checked against its checksum), its loaded entry
    function and seed count, or None (a miss, or a corrupt entry: deleted with a warning)."""
    path = _entry(root, digest)
    if not path.exists():
        return None
    wait_isa_probe()
    try:
        header, source = path.read_text().split("\n", 1)
        checksum, seeds = header.removeprefix("# sha256 ").split(" seeds ")
        if checksum != _checksum(source):
            raise ValueError("checksum mismatch")
        return source, load_module(source), int(seeds)
    except Exception as error:  # any damage: the entry is rebuilt, never fatal
        path.unlink(missing_ok=True)
        warnings.warn(f"torch.compile(backend='neuron'): cache entry {path} is corrupt or was modified "
                      f"({error}); deleted it, recompiling the graph.", stacklevel=2)
        return None


def store(root: Path, digest: str, source: str, seeds: int) -> None:
    """Write the generated module and the number of random seeds its entry function takes."""
    path = _entry(root, digest)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(f"# sha256 {_checksum(source)} seeds {seeds}\n{source}")
    os.replace(tmp.name, path)
