"""Compiling adaptive-eager segments: the compile service.

The device hands a segment it has seen often enough to :func:`_request` (``csrc/shim/adaptive/compile_requests.cpp``,
``request_compile``). A background thread takes the requests one at a time, gets each fused kernel
from the executable cache or from the compile process (compile_worker.py, which runs
:func:`.kernel_source.compile_to_source` on the segment's replay, :mod:`.replay`), loads it and
installs it on the device. :func:`start` gives the device this compiler; the switch
(:mod:`torch_neuronx.adaptive`) waits for, drops and counts the compiles here.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

import torch

from .. import _C
from .kernel_source import compile_to_source, native_entry_source, native_library
from .messages import read_message, write_message
from .replay import Unsupported, operator_overload, summary, varying_values

# Importable from here, as before the replay and the kernel source had modules of their own.
__all__ = ["Unsupported", "compile_to_source", "drop_queued", "metrics", "native_entry_source", "native_library",
           "reset_metrics", "start", "wait_for_compiles"]

_FAILURES_KEPT = 20

_ids = iter(range(1 << 62))
_jobs: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
_pending = 0
_pending_changed = threading.Condition()
_worker: threading.Thread | None = None
_stopping = threading.Event()
_compile_seconds = 0.0
_compile_cache_hits = 0
_failures: collections.deque[str] = collections.deque(maxlen=_FAILURES_KEPT)


def _request(segment_id: int, description: dict[str, Any]) -> None:
    """The device's compile request (called on whichever thread ended the segment)."""
    global _pending
    with _pending_changed:
        _pending += 1
    _jobs.put((segment_id, description))



class _CompileProcess:
    """The compile process (compile_worker.py), started on first use and again if it dies."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None  # its stderr (compiler output), for the reason it died

    def compile(self, description: dict[str, Any]) -> tuple[str, Any]:
        if self.process is None or self.process.poll() is not None:
            env = {**os.environ, "TORCH_NEURONX_EAGER_MODE": "eager"}
            self.log = tempfile.TemporaryFile()
            self.process = subprocess.Popen([sys.executable, "-m", "torch_neuronx.adaptive.compile_worker"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=self.log, env=env)
        # The log only has to say why the process died during this request: keeping earlier
        # requests' compiler output would grow a file for as long as the program runs. (The
        # process shares the file's offset and is idle between requests.)
        self.log.seek(0)
        self.log.truncate()
        try:
            write_message(self.process.stdin, description)
            answer = read_message(self.process.stdout)
        except (BrokenPipeError, OSError) as error:
            answer = None
            reason = str(error)
        else:
            reason = "the compile process exited"
        if answer is None:
            reason += self.last_words()
            self.stop()
            return "error", reason
        return answer

    def last_words(self) -> str:
        """The last line the process wrote to stderr (its exception, when it raised one)."""
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - 2000))
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return f": {lines[-1]}" if lines else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.log.close()


_process = _CompileProcess()


_META = "# adaptive segment "  # the last line of a cached segment module: how to call it


def _digest(d: dict[str, Any]) -> str:
    """The executable-cache key of a segment: everything its generated code depends on (its
    description with the scalars that changed between sightings left out, the torch and backend
    versions, the vector instruction set), none of what only this process knows (signature
    identities)."""
    from ..compile import cache
    varying = varying_values(d)
    stable = {k: v for k, v in d.items() if k not in ("values", "first_values")}
    stable["values"] = [None if i in varying else (type(v).__name__, v) for i, v in enumerate(d["values"])]
    return hashlib.sha256(repr((sorted(stable.items()), torch.__version__, cache.backend_version(),
                                cache.vector_isa(), "adaptive-segment")).encode()).hexdigest()


def _compiled(d: dict[str, Any]) -> tuple[str, dict[str, Any] | str]:
    """("ok", the loaded kernel and how to call it) or ("error", why), from the executable cache
    (same rules as compiled graphs, docs/compile.md) or the compile process."""
    global _compile_cache_hits
    from ..compile import cache, settings
    root = settings.cache_dir()
    if root is None:
        return _loaded(*_process.compile(d))
    digest = _digest(d)
    with cache.lock(root, digest):
        entry = cache.load_with_source(root, digest)
        if entry is not None:
            _compile_cache_hits += 1
            return "ok", {**json.loads(entry[0].rsplit("\n", 1)[-1].removeprefix(_META)), "kernel": entry[1]}
        status, answer = _process.compile(d)
        if status == "ok":
            meta = {k: v for k, v in answer.items() if k != "source"}
            answer["source"] = f"{answer['source'].rstrip()}\n{_META}{json.dumps(meta)}"
            cache.store(root, digest, answer["source"], 0)
        return _loaded(status, answer)


def _loaded(status: str, answer: Any) -> tuple[str, dict[str, Any] | str]:
    """A compile process's answer with its generated module loaded ("kernel")."""
    if status != "ok":
        return status, answer
    from ..compile.generated_module import load_module
    try:
        return "ok", {**answer, "kernel": load_module(answer["source"])}
    except Exception as error:
        return "error", f"loading the generated module: {type(error).__name__}: {error}"


def _compile_one(segment_id: int, d: dict[str, Any]) -> None:
    global _compile_seconds
    start = time.perf_counter()
    status, answer = _compiled(d)
    _compile_seconds += time.perf_counter() - start
    if status != "ok":
        _C._adaptive_failed(segment_id)
        _failures.append(f"{summary(operator_overload(*o) for o in d['ops'])}: {answer}")
        return
    name = f"neuron::adaptive_segment_{next(_ids)}"
    try:
        _C._adaptive_install(segment_id, answer["kernel"], native_library(answer["kernel"]),
                             answer["input_refs"], answer["outputs"],
                             answer["runtime_values"], name, answer["summary"])
    except RuntimeError:  # the segments were reset (reset_adaptive) while it compiled
        pass


def _work() -> None:
    global _pending
    while True:
        job = _jobs.get()
        if job is None:
            return
        try:
            if not _stopping.is_set():
                _compile_one(*job)
        finally:
            with _pending_changed:
                _pending -= 1
                _pending_changed.notify_all()


def start() -> None:
    """Give the device its compiler (once)."""
    global _worker
    if _worker is None:
        from ..compile import cache
        cache.start_isa_probe()  # from this thread: the probe's imports must not run beside the program's
        _worker = threading.Thread(target=_work, name="neuron-adaptive-compile", daemon=True)
        _worker.start()
        _C._adaptive_set_compiler(_request)
        atexit.register(_shutdown)


def _shutdown() -> None:
    """At exit: what the cores hold is launched, the compile under way finishes (queued ones are
    dropped), and the compiled kernels — Python objects — are released while Python still runs."""
    _stopping.set()
    _C._adaptive_set_enabled(False)
    _jobs.put(None)
    if _worker is not None:
        _worker.join(timeout=120)
    _process.stop()
    _C._adaptive_set_compiler(None)
    _C._adaptive_reset()


def drop_queued() -> None:
    """Forget the compile requests not started yet (the compile under way finishes)."""
    global _pending
    while True:
        try:
            job = _jobs.get_nowait()
        except queue.Empty:
            return
        if job is None:  # the shutdown sentinel stays
            _jobs.put(None)
            return
        with _pending_changed:
            _pending -= 1
            _pending_changed.notify_all()


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Wait until every requested segment is compiled (or failed); False on timeout."""
    with _pending_changed:
        return _pending_changed.wait_for(lambda: _pending == 0, timeout)


def metrics() -> dict[str, Any]:
    return {"compile_time_s": _compile_seconds, "compile_cache_hits": _compile_cache_hits,
            "compiles_pending": _pending,
            "recent_compile_failures": list(_failures)}


def reset_metrics() -> None:
    global _compile_seconds, _compile_cache_hits
    _compile_seconds = 0.0
    _compile_cache_hits = 0
    _failures.clear()
