"""The other ranks of a process group, for naming the one that failed.

Each rank leaves its host and pid in the group's store when the group is made, and reads the
others'. After a failed collective (over Gloo the error itself only tells of a closed
connection) a survivor names the peers that are gone: those on its own host whose process has
exited, as the shared-memory barrier does (``_C._process_exited``), and those on other hosts
whose heartbeat stopped. Ranks of a group that spans hosts beat in the group's store: one
thread per process adds one to a counter per group every :data:`BEAT_SECONDS`, and a survivor
reads the counters twice, :data:`SILENCE_SECONDS` apart.
"""
from __future__ import annotations

import atexit
import os
import socket
import threading
import time
import weakref

import torch.distributed as dist

from .. import _C

# A peer's socket closes a moment before its process is seen to exit: one look again after this.
_SETTLE_SECONDS = 0.05
BEAT_SECONDS = 0.5
# A live peer beats at least twice in this time, also when its interpreter is busy.
SILENCE_SECONDS = 4 * BEAT_SECONDS


def host_id() -> str:
    """This machine: its name and boot (containers of one host have their own names)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


class Peers:
    """The ranks of one group, as published in its store."""

    def __init__(self, store: dist.Store, rank: int, size: int) -> None:
        self._store, self._rank = store, rank
        # Group names repeat after destroy_process_group: a counter tells this group's keys apart.
        self.key = f"neuron/{(store.add('neuron/joined', 1) - 1) // size}"
        here = host_id()
        store.set(f"{self.key}/peer/{rank}", f"{here} {os.getpid()}")
        # Every rank makes the group, so every rank publishes: these reads wait only for the slowest.
        self._where: dict[int, tuple[str, int]] = {}
        for r in range(size):
            if r != rank:
                host, pid = store.get(f"{self.key}/peer/{r}").decode().rsplit(" ", 1)
                self._where[r] = (host, int(pid))
        self.remote = sorted(r for r, (host, _) in self._where.items() if host != here)
        if self.remote:
            _HEARTBEAT.join(self)

    def beat_key(self, rank: int) -> str:
        return f"{self.key}/beat/{rank}"

    def beat(self) -> None:
        self._store.add(self.beat_key(self._rank), 1)

    def leave(self) -> None:
        """The group is destroyed: stop beating for it."""
        _HEARTBEAT.leave(self)

    def describe_exited(self) -> str:
        """``"rank(s) 1 (pid 4242) exited"`` for the peers on this host that exited and
        ``"rank(s) 2 (pid 77 on node-b) stopped responding"`` for those on other hosts whose
        heartbeat stopped, else ``""``."""
        local = {r: pid for r, (_, pid) in self._where.items() if r not in self.remote}
        for attempt in range(2):
            dead = [(r, pid) for r, pid in local.items() if _C._process_exited(pid)]
            if dead or attempt:
                break
            time.sleep(_SETTLE_SECONDS)
        parts = []
        if dead:
            parts.append("rank(s) " + ", ".join(f"{r} (pid {pid})" for r, pid in dead) + " exited")
        silent = self._silent()
        if silent:
            named = ", ".join(f"{r} (pid {self._where[r][1]} on {self._where[r][0].split('/')[0]})" for r in silent)
            parts.append(f"rank(s) {named} stopped responding (no heartbeat for {SILENCE_SECONDS:g} s)")
        return "; ".join(parts)

    def _silent(self) -> list[int]:
        """The peers on other hosts whose heartbeat did not move in :data:`SILENCE_SECONDS` (none
        when the store is unreachable: then nothing can be told apart)."""
        if not self.remote:
            return []
        try:
            before = {r: self._store.add(self.beat_key(r), 0) for r in self.remote}
            time.sleep(SILENCE_SECONDS)
            return [r for r in self.remote if self._store.add(self.beat_key(r), 0) == before[r]]
        except Exception:  # the store's server may have died with a rank
            return []


class _Heartbeat:
    """One thread per process beating for every group that spans hosts; stopped at exit (before
    the interpreter finalizes, so the thread never wakes into a finalizing interpreter)."""

    def __init__(self) -> None:
        self._groups: weakref.WeakSet[Peers] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()  # the process the thread runs in (a forked child has none)

    def join(self, peers: Peers) -> None:
        peers.beat()
        with self._lock:
            self._groups.add(peers)
            if self._thread is None or os.getpid() != self._pid:
                self._pid = os.getpid()
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="neuron-heartbeat", daemon=True)
                self._thread.start()
                atexit.register(self.stop)

    def leave(self, peers: Peers) -> None:
        with self._lock:
            self._groups.discard(peers)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * BEAT_SECONDS)

    def _run(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            with self._lock:
                groups = list(self._groups)
            for peers in groups:
                try:
                    peers.beat()
                except Exception:  # a store that is gone: the peers' check then names nobody
                    pass


_HEARTBEAT = _Heartbeat()
