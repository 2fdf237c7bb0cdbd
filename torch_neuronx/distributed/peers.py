"""The other ranks of a process group, for naming the one that failed.

Each rank leaves its host and pid in the group's store when the group is made. After a failed
collective a survivor looks up the peers on its own host and names those whose process has
exited (over Gloo the error itself only tells of a closed connection), as the shared-memory
barrier does (``_C._process_exited``). Peers on other hosts
cannot be checked from here and are not named.
"""
from __future__ import annotations

import os
import socket
import time

import torch.distributed as dist

from .. import _C

# A peer's socket closes a moment before its process is seen to exit: one look again after this.
_SETTLE_SECONDS = 0.05


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
        self._store, self._rank, self._size = store, rank, size
        # Group names repeat after destroy_process_group: a counter tells this group's keys apart.
        self.key = f"neuron/{(store.add('neuron/joined', 1) - 1) // size}"
        store.set(f"{self.key}/peer/{rank}", f"{host_id()} {os.getpid()}")

    def _local(self) -> dict[int, int]:
        """Rank -> pid of the peers on this host that published themselves (never blocks: a
        store that is gone with a dead rank gives none)."""
        here, out = host_id(), {}
        for r in range(self._size):
            key = f"{self.key}/peer/{r}"
            try:
                if r == self._rank or not self._store.check([key]):
                    continue
                host, pid = self._store.get(key).decode().rsplit(" ", 1)
            except Exception:  # the store's server may have died with a rank
                return out
            if host == here:
                out[r] = int(pid)
        return out

    def describe_exited(self) -> str:
        """``"rank(s) 1 (pid 4242) exited"`` for the peers on this host that exited, else ``""``."""
        local = self._local()
        for attempt in range(2):
            dead = [(r, pid) for r, pid in local.items() if _C._process_exited(pid)]
            if dead or attempt:
                break
            time.sleep(_SETTLE_SECONDS)
        if not dead:
            return ""
        return "rank(s) " + ", ".join(f"{r} (pid {pid})" for r, pid in dead) + " exited"
