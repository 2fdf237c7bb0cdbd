"""The torch.distributed job a launch runs in: the global ranks of collectives and their transport.

In a process of an initialized torch.distributed job (W processes, this one rank r), every process
launches the kernel on the same number n of programs, and the ranks of `nki.collectives` are the
programs of all the launches, process-major: program p of process r is rank ``r * n + p``. Without
a job, the ranks are the programs of the launch (a job of one process).

A collective whose rank list spans processes meets in each process like any other (the last of
the process's programs to arrive moves the data), and that program first exchanges its programs'
calls (the sources' values, the destinations' layouts) with the other processes through the job's
c10d store, under the key of the rank list and of this process's count of cross-process exchanges
on that list: the n-th collective on a rank list pairs up in every process, as within a launch.
The store, not a process group, because its set/get work from any thread without being a
collective call of the job (a kernel on neuron tensors runs on a device worker thread). The store
is the job's own rendezvous, so its values are pickled, as torch's object collectives do.
"""
from __future__ import annotations

import contextlib
import contextvars
import pickle
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import NKIError
from .context import current

FIRST_PAUSE, LONGEST_PAUSE = 1e-4, 0.01  # seconds between two looks at the store while waiting


@dataclass(frozen=True)
class World:
    """The ranks of a launch's collectives: `programs` per process, process-major."""

    processes: int
    process: int
    programs: int

    @property
    def size(self) -> int:
        return self.processes * self.programs

    def rank(self, program: int) -> int:
        return self.process * self.programs + program

    def process_of(self, rank: int) -> int:
        return rank // self.programs

    def local_programs(self, ranks: Sequence[int]) -> tuple[int, ...]:
        """The programs of this process among `ranks`, in their order."""
        return tuple(r - self.rank(0) for r in ranks if self.process_of(r) == self.process)

    def __str__(self) -> str:
        if self.processes == 1:
            return f"the {self.size} ranks (programs) of the launch 0..{self.size - 1}"
        return (f"the {self.size} ranks 0..{self.size - 1} of the torch.distributed job ({self.processes} processes "
                f"x {self.programs} programs, rank = process * {self.programs} + program)")


@dataclass
class _Job:
    """This process's side of a torch.distributed job: its store and the counts that key exchanges."""

    store: Any  # the default process group's store, as init_process_group made it
    processes: int
    process: int
    prefixed: Any  # `store` under "nki/"
    sequences: dict[tuple[int, ...], int] = field(default_factory=dict)  # rank list -> exchanges so far
    # Launch -> its serial among this process's launches that exchanged (pairs launches for the
    # program-count check).
    launches: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    launch_count: int = 0

    def next_key(self, ranks: tuple[int, ...]) -> str:
        with _lock:
            sequence = self.sequences.get(ranks, 0)
            self.sequences[ranks] = sequence + 1
        return f"{','.join(map(str, ranks))}/{sequence}"

    def announce(self, launch: Any, programs: int) -> int:
        """This launch's serial, published with its program count on its first exchange."""
        with _lock:
            if launch in self.launches:
                return self.launches[launch]
            serial = self.launches[launch] = self.launch_count
            self.launch_count += 1
        self.prefixed.set(f"launch/{self.process}", f"{serial} {programs}")
        return serial


_lock = threading.Lock()
_job: _Job | None = None
# Runs that only learn a kernel's result layout (on zeros, for fake tensors) exchange nothing: a
# process may trace a kernel its peers do not, and the store's counts must stay those of real runs.
_mirrored: contextvars.ContextVar[bool] = contextvars.ContextVar("nki_mirrored_job", default=False)


@contextlib.contextmanager
def mirrored() -> Iterator[None]:
    """Within it, the other processes' ranks of an exchange get the payloads of this process's
    program of the same index (the launch's programs see it: they copy the caller's context)."""
    token = _mirrored.set(True)
    try:
        yield
    finally:
        _mirrored.reset(token)


def _current_job() -> _Job | None:
    import torch.distributed as dist  # lazily: the simulator does not need torch.distributed otherwise
    if not (dist.is_available() and dist.is_initialized()):
        return None
    store = dist.distributed_c10d._get_default_store()
    global _job
    with _lock:
        if _job is None or _job.store is not store:  # the first call, or a new job after destroy_process_group
            _job = _Job(store, dist.get_world_size(), dist.get_rank(), dist.PrefixStore("nki/", store))
        return _job


def world() -> World:
    """The ranks of the calling program's launch."""
    programs = current().launch.count
    job = _current_job()
    return World(1, 0, programs) if job is None else World(job.processes, job.process, programs)


@dataclass
class _Message:
    """What a process publishes for an exchange: its program count and its ranks' payloads
    (None: it gave up waiting)."""

    programs: int
    payloads: dict[int, Any] | None


def exchange(world: World, ranks: tuple[int, ...], mine: dict[int, Any], what: str) -> dict[int, Any]:
    """The payloads of the ranks of other processes in the rank list `ranks`, given this process's
    (`mine`, rank -> payload). Waits outside the launch's baton, within the store's timeout."""
    if _mirrored.get():
        return {r: mine.get(world.rank(r % world.programs), next(iter(mine.values())))
                for r in ranks if world.process_of(r) != world.process}
    job = _current_job()
    assert job is not None, "ranks of other processes exist only in a torch.distributed job"
    ctx = current()
    serial = job.announce(ctx.launch, world.programs)
    key = job.next_key(ranks)
    processes = sorted({world.process_of(r) for r in ranks})
    job.prefixed.set(f"{key}/{world.process}", pickle.dumps(_Message(world.programs, mine)))
    wait = _Wait(job, world, key, [p for p in processes if p != world.process], serial, ranks, what)
    try:
        messages = ctx.launch.outside(ctx.rank, wait.receive, what)
    finally:
        _leave(job.prefixed, key, processes)
    return {r: payload for m in messages for r, payload in m.payloads.items()}


def _leave(store: Any, key: str, processes: list[int]) -> None:
    """Count this process out of the exchange; the last one deletes its keys (all have read them)."""
    if store.add(f"{key}/done", 1) == len(processes):
        for p in processes:
            store.delete_key(f"{key}/{p}")
        store.delete_key(f"{key}/done")


@dataclass
class _Wait:
    """This process's wait for the messages of the other processes (`peers`) of one exchange."""

    job: _Job
    world: World
    key: str
    peers: list[int]
    serial: int
    ranks: tuple[int, ...]
    what: str

    def receive(self, failed: Callable[[], bool]) -> list[_Message]:
        """Their messages, once all are in the store (none if the launch failed meanwhile)."""
        keys = [f"{self.key}/{p}" for p in self.peers]
        deadline = time.monotonic() + self.job.store.timeout.total_seconds()
        pause = FIRST_PAUSE
        while not self.job.prefixed.check(keys):
            self._check_programs()
            if failed():
                return []
            if time.monotonic() > deadline:
                self._give_up()
            time.sleep(pause)
            pause = min(2 * pause, LONGEST_PAUSE)
        messages = [pickle.loads(value) for value in self.job.prefixed.multi_get(keys)]
        for p, message in zip(self.peers, messages):
            if message.payloads is None:
                raise NKIError("collective-timeout", f"{self.what}: process {p} (ranks {self._ranks_of([p])}) gave up "
                               f"waiting for this one before it joined")
            self._same_programs(p, message.programs)
        return messages

    def _ranks_of(self, processes: list[int]) -> list[int]:
        return [r for r in self.ranks if self.world.process_of(r) in processes]

    def _same_programs(self, process: int, programs: int) -> None:
        if programs != self.world.programs:
            raise NKIError("collective-programs", f"{self.what}: process {process} launched the kernel on {programs} "
                           f"programs and process {self.world.process} on {self.world.programs}: every process of "
                           f"the torch.distributed job must launch it on the same number of programs (rank = "
                           f"process * programs + program)")

    def _check_programs(self) -> None:
        """A peer whose launch of the same serial has another program count never joins this
        exchange (its rank lists differ): say so now rather than at the timeout."""
        for p in self.peers:
            key = f"launch/{p}"
            if self.job.prefixed.check([key]):
                serial, programs = map(int, self.job.prefixed.get(key).split())
                if serial == self.serial:
                    self._same_programs(p, programs)

    def _give_up(self) -> None:
        missing = [p for p in self.peers if not self.job.prefixed.check([f"{self.key}/{p}"])]
        # Late peers that find this instead of our message fail too, rather than wait in turn.
        self.job.prefixed.set(f"{self.key}/{self.world.process}", pickle.dumps(_Message(self.world.programs, None)))
        raise NKIError("collective-timeout", f"{self.what}: ranks {self._ranks_of(missing)} (process(es) {missing}) "
                       f"did not join within the store timeout of {self.job.store.timeout.total_seconds():g} s "
                       f"(init_process_group(timeout=...)); every process must issue the same collectives on a "
                       f"rank list in the same order")
