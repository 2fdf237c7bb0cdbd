"""The transport between processes on one host: a shared-memory segment per process group.

A simulated core's memory is host memory of its process, so ranks on one host can move the
bytes through memory instead of TCP (what NeuronLink is to the cores of one instance). The
segment holds a control page (the barrier, :mod:`csrc/runtime/shared_link.h`), a signature row
per rank and two sets of one slot per rank. A collective runs in chunks of a slot: each rank
copies its chunk into its slot, waits at the barrier, then reads the slots it needs. Chunks
alternate between the two sets, so a rank writing set ``k`` knows from the barrier of the
previous chunk that every rank has finished reading set ``k`` two chunks back: one barrier per
chunk (two for all-reduce, whose reduced chunk is read back after a second one).

Reductions run in rank order (slot 0, then 1, ...) for every element, so all ranks get the same
bits. Groups whose ranks are not all on this host, or with ``TORCH_NEURONX_DIST_SHARED_MEMORY=0``,
use Gloo (see docs/distributed.md).
"""
from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .. import _C
from ..runtime.topology import env_flag

ENV = "TORCH_NEURONX_DIST_SHARED_MEMORY"
MAX_RANKS = 64  # the control page's capacity (kMaxLinkRanks)
SLOT_BYTES = 2 << 20
SIGNATURE_INTS = 64
# An all-to-all exchanges every rank's input and output splits in a signature row.
MAX_ALL_TO_ALL_RANKS = (SIGNATURE_INTS - 1) // 2
_CONTROL_BYTES = 4096
_DIRECTORY = "/dev/shm"

_REDUCE: dict[ReduceOp.RedOpType, Callable[..., torch.Tensor]] = {
    ReduceOp.SUM: torch.add, ReduceOp.PRODUCT: torch.mul, ReduceOp.MIN: torch.minimum,
    ReduceOp.MAX: torch.maximum, ReduceOp.BAND: torch.bitwise_and, ReduceOp.BOR: torch.bitwise_or,
    ReduceOp.BXOR: torch.bitwise_xor,
}


class SharedMemoryLink:
    """The ranks of one process group on this host, meeting in one shared-memory segment."""

    def __init__(self, segment: mmap.mmap, rank: int, size: int, timeout: timedelta) -> None:
        self.rank, self.size, self._timeout = rank, size, timeout.total_seconds()
        self._segment = segment
        memory = torch.frombuffer(segment, dtype=torch.uint8)
        self._control = memory.data_ptr()
        signatures = memory[_CONTROL_BYTES:_CONTROL_BYTES + 2 * size * SIGNATURE_INTS * 8]
        self._signatures = signatures.view(torch.int64).view(2, size, SIGNATURE_INTS)
        slots = memory[_CONTROL_BYTES + signatures.numel():]
        self._slots = slots[:2 * size * SLOT_BYTES].view(2, size, SLOT_BYTES)
        self._set = 0  # the set the next chunk uses
        _C._link_join(self._control, rank)

    @classmethod
    def connect(cls, store: dist.Store, key: str, rank: int, size: int, timeout: timedelta,
                one_host: bool) -> SharedMemoryLink | None:
        """The group's link, or None on every rank when any rank cannot map the segment (ranks
        on other hosts (``one_host`` false), no room in /dev/shm, the variable off): the ranks
        agree through ``store``, under the group's ``key`` (:class:`.peers.Peers`)."""
        if not 1 < size <= MAX_RANKS:
            return None
        key = f"{key}/shm"
        wanted = one_host and env_flag(os.environ, ENV, default=True)
        if rank == 0:
            store.set(f"{key}/path", _create(size) if wanted else "")
        path = store.get(f"{key}/path").decode()
        segment = _map(path) if wanted and path else None
        # Joined (its pid in the control page) before the others hear of it: a peer's barrier
        # takes a missing pid for a dead rank.
        link = cls(segment, rank, size, timeout) if segment is not None else None
        store.set(f"{key}/mapped/{rank}", "1" if link is not None else "0")
        everyone = all(store.get(f"{key}/mapped/{r}") == b"1" for r in range(size))
        if rank == 0 and path:
            os.unlink(path)  # every rank has mapped it or given up: nothing is left behind
        return link if everyone else None

    # -- the steps of a chunk
    def _slot_views(self, dtype: torch.dtype) -> torch.Tensor:
        """The current set's slots as ``(size, elements)`` of ``dtype``."""
        return self._slots[self._set].view(dtype)

    def _barrier(self) -> None:
        _C._link_barrier(self._control, self.rank, self.size, self._timeout)

    def _next_set(self) -> None:
        self._set ^= 1

    def _from_root(self, root: int, length: int, dtype: torch.dtype,
                   write: Callable[[int, torch.Tensor], None]) -> Iterator[tuple[int, torch.Tensor]]:
        """``length`` elements from the root, a chunk at a time: the root calls ``write(start,
        slots)``; after the barrier, (where the chunk starts, the slots as ``(size, chunk)``)."""
        per = SLOT_BYTES // torch.empty((), dtype=dtype).element_size()
        for start in range(0, length, per):
            slots = self._slot_views(dtype)[:, :min(per, length - start)]
            if self.rank == root:
                write(start, slots)
            self._barrier()
            yield start, slots
            self._next_set()

    def _exchange(self, pieces: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
        """Every rank's ``pieces`` (``(k, m)``, one shape on every rank: a whole tensor as one
        piece, or piece r for rank r), a chunk at a time: each rank writes its chunk of every
        piece to its slot; after the barrier, (where the chunk starts, the slots as ``(from rank,
        piece, chunk)``)."""
        k, m = pieces.shape
        per = SLOT_BYTES // pieces.element_size() // k
        for start in range(0, m, per):
            n = min(per, m - start)
            slots = self._slot_views(pieces.dtype)[:, :k * n].view(self.size, k, n)
            slots[self.rank].copy_(pieces[:, start:start + n])
            self._barrier()
            yield start, slots
            self._next_set()

    # -- collectives on dense host tensors
    def exchange_values(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (fewer than :data:`SIGNATURE_INTS`), by rank."""
        if len(values) >= SIGNATURE_INTS:
            raise ValueError(f"a signature of {len(values)} values does not fit the link's {SIGNATURE_INTS - 1}")
        rows = self._signatures[self._set]
        rows[self.rank, 0] = len(values)
        rows[self.rank, 1:1 + len(values)] = torch.tensor(values, dtype=torch.int64)
        self._barrier()
        table = [row[1:1 + int(row[0])].tolist() for row in rows]
        self._next_set()
        return table

    def agree(self, signature: list[int]) -> list[list[int]] | None:
        """Every rank's ``signature`` when they differ, None when all are alike."""
        table = self.exchange_values(signature)
        return None if all(row == table[self.rank] for row in table) else table

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp.RedOpType) -> None:
        flat, reduce = tensor.view(-1), _REDUCE[op]
        for start, slots in self._exchange(flat.view(1, -1)):
            # This rank reduces its share of the chunk into slot 0, which every rank then reads.
            slots = slots[:, 0]
            lo, hi = _share(slots.shape[1], self.rank, self.size)
            mine = slots[0, lo:hi]
            for r in range(1, self.size):
                reduce(mine, slots[r, lo:hi], out=mine)
            self._barrier()
            flat[start:start + slots.shape[1]].copy_(slots[0])

    def gather(self, output: torch.Tensor | None, input: torch.Tensor) -> None:
        """Every rank's ``input`` into ``output`` (``size`` times as large) where it is given:
        on every rank for an all-gather, on the root for a gather."""
        whole = None if output is None else output.view(self.size, -1)
        for start, slots in self._exchange(input.view(1, -1)):
            if whole is not None:
                whole[:, start:start + slots.shape[2]].copy_(slots[:, 0])

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, op: ReduceOp.RedOpType) -> None:
        mine, reduce = output.view(-1), _REDUCE[op]
        for start, slots in self._exchange(input.view(self.size, -1)):
            chunk = mine[start:start + slots.shape[2]]
            chunk.copy_(slots[0, self.rank])
            for r in range(1, self.size):
                reduce(chunk, slots[r, self.rank], out=chunk)

    def all_to_all(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                   input_splits: list[int]) -> None:
        """Piece r of every rank's flat ``input`` to rank r, in rank order; the splits count
        elements. Every rank's splits are exchanged first, so sizes that do not match raise on
        every rank (:data:`MAX_ALL_TO_ALL_RANKS` ranks at most)."""
        table = self.exchange_values([*input_splits, *output_splits])
        sends = [row[:self.size] for row in table]  # sends[j][r]: elements from rank j to rank r
        wrong = [(j, r) for j in range(self.size) for r in range(self.size) if sends[j][r] != table[r][self.size + j]]
        if wrong:
            j, r = wrong[0]
            raise ValueError(f"all_to_all: rank {j} sends {sends[j][r]} elements to rank {r}, which expects "
                             f"{table[r][self.size + j]} (every rank's input splits: {sends})")
        sent, received = _starts(input_splits), _starts(output_splits)
        per = SLOT_BYTES // input.element_size() // self.size
        for start in range(0, max(max(row) for row in sends), per):
            slots = self._slot_views(input.dtype)[:, :self.size * per].view(self.size, self.size, per)
            for r in range(self.size):
                n = min(max(input_splits[r] - start, 0), per)
                slots[self.rank, r, :n].copy_(input[sent[r] + start:sent[r] + start + n])
            self._barrier()
            for j in range(self.size):
                n = min(max(sends[j][self.rank] - start, 0), per)
                output[received[j] + start:received[j] + start + n].copy_(slots[j, self.rank, :n])
            self._next_set()

    def broadcast(self, tensor: torch.Tensor, root: int) -> None:
        flat = tensor.view(-1)

        def write(start: int, slots: torch.Tensor) -> None:
            slots[root].copy_(flat[start:start + slots.shape[1]])
        for start, slots in self._from_root(root, flat.numel(), flat.dtype, write):
            if self.rank != root:
                flat[start:start + slots.shape[1]].copy_(slots[root])

    def scatter(self, output: torch.Tensor, input: torch.Tensor | None, root: int) -> None:
        """Piece r of the root's ``input`` (``size`` times ``output``; None elsewhere) to rank r."""
        mine = output.view(-1)

        def write(start: int, slots: torch.Tensor) -> None:
            slots.copy_(input.view(self.size, -1)[:, start:start + slots.shape[1]])
        for start, slots in self._from_root(root, mine.numel(), mine.dtype, write):
            mine[start:start + slots.shape[1]].copy_(slots[self.rank])


def supports(op: ReduceOp.RedOpType, tensor: torch.Tensor) -> bool:
    """Whether the link reduces ``tensor`` with ``op`` (the bitwise ops need integers or bool)."""
    floating = tensor.dtype.is_floating_point
    return op in _REDUCE and not (floating and op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR))


def _starts(lengths: list[int]) -> list[int]:
    """Where each of consecutive pieces of ``lengths`` starts."""
    return [sum(lengths[:i]) for i in range(len(lengths))]


def _share(n: int, rank: int, size: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share of ``n`` elements split over ``size`` ranks."""
    return n * rank // size, n * (rank + 1) // size


def _segment_bytes(size: int) -> int:
    return _CONTROL_BYTES + 2 * size * SIGNATURE_INTS * 8 + 2 * size * SLOT_BYTES


def _create(size: int) -> str:
    """A new zeroed segment with its memory reserved (an empty path when /dev/shm has no room:
    touching an unreserved page of a full tmpfs would kill the process with SIGBUS)."""
    path = os.path.join(_DIRECTORY, f"torch_neuronx_link_{uuid.uuid4().hex}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return ""
    try:
        os.posix_fallocate(fd, 0, _segment_bytes(size))
    except OSError:
        os.unlink(path)
        return ""
    finally:
        os.close(fd)
    return path


def _map(path: str) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        return mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED)
    finally:
        os.close(fd)
