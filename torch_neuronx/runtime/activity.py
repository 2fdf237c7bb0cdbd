"""Each process that uses a neuron core publishes what it does there, for ``neuron-ls`` and
``neuron-top`` in another terminal: a small JSON file per process in a directory of the user's
(``TORCH_NEURONX_ACTIVITY_DIR``, default ``/dev/shm/torch_neuronx-<uid>``), rewritten every
half second by a daemon thread from the process's first neuron operator, removed at exit.

A file holds the process's id and command, and per core it used: the machine-wide core number,
memory allocated/reserved/peak and capacity, kernels executed (by the core's worker and on
launching threads) and kernels queued or running. Readers drop files of processes that exited.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from .. import _C

ENV = "TORCH_NEURONX_ACTIVITY_DIR"
PERIOD_SECONDS = 0.5


def directory() -> Path:
    """Where the processes of this user publish (shared by writers and readers)."""
    default = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return Path(os.environ.get(ENV) or default / f"torch_neuronx-{os.getuid()}")


def snapshot(visible_cores: tuple[int, ...], started: float) -> dict[str, Any] | None:
    """This process's use of its cores now, or None before it used any."""
    cores = []
    for index, core in enumerate(visible_cores):
        activity = _C._core_activity(index)
        if activity is None:
            continue
        stats = torch.accelerator.memory_stats(index)
        worker, host, pending = activity
        cores.append({
            "device": index, "core": core, "capacity": _C._hbm_capacity(index),
            "allocated": stats.get("allocated_bytes.all.current", 0),
            "reserved": stats.get("reserved_bytes.all.current", 0),
            "peak": stats.get("allocated_bytes.all.peak", 0),
            "kernels": worker + host, "pending": pending,
        })
    if not cores:
        return None
    return {"pid": os.getpid(), "command": " ".join([Path(sys.executable).name, *sys.argv]), "started": started,
            "updated": time.time(), "cores": cores}


def _write(path: Path, record: dict[str, Any]) -> None:
    # Written beside and renamed, so that a reader never sees half a file.
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(record))
    partial.replace(path)


class Publisher:
    """The daemon thread that keeps this process's file current."""

    def __init__(self, visible_cores: tuple[int, ...]) -> None:
        self.visible_cores = visible_cores
        self.pid, self.started = os.getpid(), time.time()
        self.stop = threading.Event()
        self.path: Path | None = None
        threading.Thread(target=self._run, name="torch_neuronx-activity", daemon=True).start()
        atexit.register(self.close)

    def _run(self) -> None:
        while not self.stop.wait(PERIOD_SECONDS):
            try:
                self.publish()
            except OSError:
                self.path = None  # the directory went away or is not writable: try again next time

    def publish(self) -> None:
        record = snapshot(self.visible_cores, self.started) if _C._is_initialized() else None
        if record is None:
            return
        if self.path is None:
            folder = directory()
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path = folder / f"{os.getpid()}.json"
        _write(self.path, record)

    def close(self) -> None:
        self.stop.set()
        if self.path is not None and self.pid == os.getpid():  # not a forked child's exit
            self.path.unlink(missing_ok=True)


def start(visible_cores: tuple[int, ...]) -> None:
    """Publish from now on (once per process; ``torch.neuron._lazy_init`` calls it before the
    first operator on a neuron device, so that importing torch starts no thread)."""
    global _started
    if not _started:
        _started = True
        Publisher(visible_cores)


_started = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_all() -> list[dict[str, Any]]:
    """The records of the running processes, by pid (files of exited processes are removed)."""
    records = []
    folder = directory()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # removed or replaced while read
        if _alive(record["pid"]):
            records.append(record)
        else:
            path.unlink(missing_ok=True)
    return sorted(records, key=lambda r: r["pid"])
