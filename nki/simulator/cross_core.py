"""Cross-core instructions: data exchange between the programs (simulated cores) of one launch.

Each instruction checks its own operands in the calling program, records its estimated DMA cost
there, and meets the other programs of its group (`Launch.exchange`): the n-th call of a kind in
each program of a group pairs up, and the last program to arrive moves the data for all of them.
Data movement keeps the values bit-exact (rounded only to a destination of another dtype);
reductions compute in fp32 and round to the destination dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import NKIError, source_location
from . import cost_model as cm, instructions as _ins
from .context import current
from .ops import op_name
from .tile import AccessPattern, Tile

REDUCE_OPS: dict[str, Callable[..., np.ndarray]] = {"add": np.add, "minimum": np.minimum, "maximum": np.maximum}


# ----------------------------------------------------------------------------- operands
@dataclass
class Operand:
    """A tensor a cross-core instruction reads or writes: an HBM tensor / slice or an on-chip tile."""

    target: AccessPattern | Tile

    @classmethod
    def of(cls, x: Any, what: str) -> Operand:
        return cls(_ins._pattern(x, what))

    @property
    def space(self) -> str:
        return "hbm" if isinstance(self.target, AccessPattern) else self.target.buffer

    @property
    def shared(self) -> bool:
        """An ``nl.shared_hbm`` tensor (one tensor for every program of the launch)."""
        return isinstance(self.target, AccessPattern) and self.target.tensor.buffer == "shared_hbm"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.target.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.target.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def read(self) -> np.ndarray:
        if isinstance(self.target, AccessPattern):
            return np.array(self.target.read())
        return np.array(self.target.data)

    def write(self, values: np.ndarray, what: str) -> None:
        values = _ins.fit_value(values, self.shape, what)
        if isinstance(self.target, AccessPattern):
            self.target.write(_ins._round(values, self.dtype))
        else:
            self.target.write(Ellipsis, _ins._round(values, self.dtype, current().fp32_compute))

    def snapshot(self, values: bool) -> Snapshot:
        """The operand as other processes see it: its values (a source) or only its layout (a destination)."""
        return Snapshot(self.shape, self.dtype, self.read() if values else None)


@dataclass
class Snapshot:
    """An operand of a program of another process (collectives across processes): a source's
    values, or a destination's shape and dtype. Each process writes the destinations of its own
    programs only, so writes to a snapshot go nowhere."""

    shape: tuple[int, ...]
    dtype: np.dtype
    values: np.ndarray | None = None

    def read(self) -> np.ndarray:
        return np.array(self.values) if self.values is not None else np.zeros(self.shape, self.dtype)

    def write(self, values: np.ndarray, what: str) -> None:
        """The destination's own process writes it."""


def reduce_op(op: Any, what: str) -> Callable[..., np.ndarray]:
    name = op_name(op)
    if name not in REDUCE_OPS:
        raise NKIError("collective-op", f"{what}: op must be nl.add, nl.minimum or nl.maximum, got '{name}'")
    return REDUCE_OPS[name]


def record(what: str, operands: Sequence[Operand]) -> None:
    """Estimated cost on the calling core: its DMA queues move the bytes of its operands."""
    ctx = current()
    nbytes = sum(o.nbytes for o in operands)
    first = operands[0]
    ctx.record(cm.DMA, what, first.shape, first.dtype, cm.dma_seconds(ctx.config, nbytes), dma_bytes=nbytes)


def meet(kind: str, members: tuple[int, ...], payload: Any,
         complete: Callable[[dict[int, Any]], Any], what: str, group: tuple[int, ...] | None = None) -> Any:
    """Pair this call with the calls of the same position of `kind` in the other `members` (programs
    of the launch). `group` (default: `members`) names the calls that pair up: the programs' rank
    list when it spans other processes too."""
    ctx = current()
    if ctx.rank not in members:
        raise NKIError("replica-group", f"{what}: program {ctx.rank} is not one of the ranks {list(members)}")
    group = members if group is None else group
    key = (kind, group, ctx.next_call((kind, group)))
    return ctx.launch.exchange(ctx.rank, key, members, payload, complete, f"{what} at {source_location()}")


def world_size() -> int:
    return current().launch.count


# ----------------------------------------------------------------------------- LNC instructions
@dataclass
class _Send:
    src: Operand
    dst: Operand
    send_to: int
    recv_from: int
    reduce: Callable[..., np.ndarray] | None  # sendrecv_compute: dst = reduce(src, received)


def _lnc_ranks(what: str, send_to_rank: Any, recv_from_rank: Any) -> None:
    if world_size() < 2:
        raise NKIError("sendrecv-lnc", f"{what} exchanges tiles between the 2 NeuronCores of a logical core: "
                       f"launch the kernel on 2 cores (kernel[2](...))")
    for name, rank in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if rank not in (0, 1):
            raise NKIError("sendrecv-rank", f"{what}: {name} must be 0 or 1 (the cores of the logical core), "
                           f"got {rank!r}")


def _pair_operands(what: str, src: Any, dst: Any, spaces: tuple[str, ...]) -> list[Operand]:
    ops = [Operand.of(src, what), Operand.of(dst, what)]
    if ops[0].space != ops[1].space or ops[0].space not in spaces:
        allowed = " or ".join(f"both {s.upper()}" for s in spaces)
        raise NKIError("sendrecv-buffer", f"{what}: src and dst must be {allowed}, got "
                       f"{ops[0].space.upper()} and {ops[1].space.upper()} (copy the data with nisa.dma_copy first)")
    if any(o.shared for o in ops):
        raise NKIError("sendrecv-buffer", f"{what}: src and dst must be private to the core, not nl.shared_hbm "
                       f"tensors (allocate them with buffer=nl.sbuf or nl.private_hbm)")
    if ops[0].dtype != ops[1].dtype:
        raise NKIError("sendrecv-dtype", f"{what}: src and dst must have the same dtype, got {ops[0].dtype} and "
                       f"{ops[1].dtype}")
    if ops[0].shape[0] != ops[1].shape[0] or math.prod(ops[0].shape) != math.prod(ops[1].shape):
        raise NKIError("sendrecv-shape", f"{what}: src {ops[0].shape} and dst {ops[1].shape} must have the same "
                       f"partitions and elements per partition")
    return ops


def sendrecv(src: Any, dst: Any, send_to_rank: int, recv_from_rank: int, what: str,
             reduce: Callable[..., np.ndarray] | None = None) -> None:
    """Send `src` to the `dst` of program `send_to_rank` and receive the `src` of program
    `recv_from_rank` into `dst` (both SBUF tiles of the same dtype and layout). With `reduce`
    (``sendrecv_compute``), dst = reduce(src, received) computed in fp32, and both operands may
    also be HBM tensors of the core (not ``nl.shared_hbm``)."""
    ctx = current()
    _lnc_ranks(what, send_to_rank, recv_from_rank)
    ops = _pair_operands(what, src, dst, ("sbuf",) if reduce is None else ("sbuf", "hbm"))
    record("sendrecv" if reduce is None else "sendrecv_compute", ops[:1])
    members = tuple(sorted({ctx.rank, int(send_to_rank), int(recv_from_rank)}))

    def complete(sends: dict[int, _Send]) -> None:
        values = {rank: s.src.read() for rank, s in sends.items()}
        for rank, s in sends.items():
            if sends[s.recv_from].send_to != rank:
                raise NKIError("sendrecv-mismatch", f"{what}: program {rank} receives from program {s.recv_from}, "
                               f"which sends to program {sends[s.recv_from].send_to}")
        for rank, s in sends.items():  # each core applies its own call's reduction
            received = values[s.recv_from]
            if s.reduce is not None:
                received = s.reduce(values[rank].astype(np.float32), received.astype(np.float32))
            s.dst.write(received, what)

    send = _Send(ops[0], ops[1], int(send_to_rank), int(recv_from_rank), reduce)
    meet("sendrecv", members, send, complete, what)


def core_barrier(data: Any, cores: Sequence[int], engine: str, what: str) -> None:
    """Wait until every program of `cores` reached this barrier (their writes to `data` are done)."""
    ctx = current()
    cores = tuple(int(c) for c in cores)
    if cores != (0, 1):
        raise NKIError("core-barrier-cores", f"{what}: only cores=(0, 1) is supported, got {cores}")
    if world_size() < 2:
        raise NKIError("core-barrier-cores", f"{what} synchronizes the 2 NeuronCores sharing an HBM stack: "
                       f"launch the kernel on 2 cores (kernel[2](...))")
    operand = Operand.of(data, what)
    if operand.space != "hbm":
        raise NKIError("core-barrier-data", f"{what}: data must be the HBM tensor both cores write (a kernel "
                       f"argument or an nl.shared_hbm tensor), got a {operand.space.upper()} tile")
    engine = engine if engine in (cm.VECTOR, cm.SCALAR, cm.GPSIMD) else cm.GPSIMD  # semaphore ops of a sequencer
    ctx.record(engine, "core_barrier", (1,), operand.dtype, cm.lane_seconds(ctx.config, engine, 1))
    meet("core_barrier", cores, None, lambda _: None, what)

