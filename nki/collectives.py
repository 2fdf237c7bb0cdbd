"""`nki.collectives` (ncc): collective communication between ranks (Neuron SDK 2.30 and later).

The ranks are the programs of a launch: ``kernel[n](...)`` runs n programs, program ``i``
(row-major index in the launch grid) is rank ``i`` and ``rank_id()`` returns it. In a process of an
initialized torch.distributed job of W processes, the ranks are the programs of every process's
launch (the same n in each): program ``i`` of process ``r`` is rank ``r * n + i``, of ``W * n``
(`nki.simulator.distributed_job`). The programs run as simulated cores (`nki.simulator.spmd`): a
collective waits until every rank of the caller's rank list issued its collective of the same
position, then moves the data for all of them; the ranks of other processes send their sources
through the job's c10d store, and every process computes the result of the whole list in rank
order (the same bits everywhere) and writes its own ranks' destinations. A collective whose other
processes do not join within the store's timeout raises ``collective-timeout``, one whose
processes launched the kernel on different numbers of programs ``collective-programs``.

Data movement is bit-exact (values are rounded only into a destination of another dtype);
reductions (``nl.add``, ``nl.minimum``, ``nl.maximum``) compute in fp32 and round to the
destination dtype. Each rank records its collective on its DMA queues at an ESTIMATED cost (the
bytes of its source and destination tensors at the core's DMA bandwidth). ``priority`` and
``name`` are accepted and have no effect.
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass as _dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .errors import NKIError as _NKIError
from .simulator import cross_core as _cross_core, distributed_job as _job
from .simulator.context import current as _current
from .simulator.cross_core import Operand as _Operand, Snapshot as _Snapshot


class rg_partition_op(enum.Enum):
    """How `ReplicaGroup.from_partition_op` maps a rank to its rank list: ``op(rank, operand)``."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


_PARTITION = {rg_partition_op.bitwise_and: operator.and_, rg_partition_op.div: operator.floordiv,
              rg_partition_op.mod: operator.mod}


class ReplicaGroup:
    """The ranks a collective runs on, as a list of rank lists: the collective runs independently
    within each rank list (``ReplicaGroup([[0, 1, 2, 3], [4, 5, 6, 7]])``); a rank is in one list."""

    def __init__(self, rank_lists: Sequence[Sequence[int]]) -> None:
        self.rank_lists = tuple(tuple(int(r) for r in ranks) for ranks in rank_lists)

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> ReplicaGroup:
        """Ranks ``[0, world_size)`` sharing ``op(rank, operand)`` form one rank list (lists in the
        order of that value): ``div, 4`` -> contiguous lists of 4, ``mod, 4`` -> strided lists."""
        lists: dict[int, list[int]] = {}
        for rank in range(world_size):
            lists.setdefault(_PARTITION[rg_partition_op(op)](rank, operand), []).append(rank)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaGroup) and other.rank_lists == self.rank_lists

    def __hash__(self) -> int:
        return hash(self.rank_lists)

    def __repr__(self) -> str:
        return f"ReplicaGroup({[list(r) for r in self.rank_lists]})"

    def members(self, what: str) -> tuple[int, ...]:
        """The calling program's rank list, after checking the group against the ranks of the launch
        (of every process's launch in a torch.distributed job)."""
        world, rank = _job.world(), rank_id()
        flat = [r for ranks in self.rank_lists for r in ranks]
        if len(set(flat)) != len(flat) or any(not 0 <= r < world.size for r in flat):
            raise _NKIError("replica-group", f"{what}: {self!r} must name each rank once, among {world}")
        for ranks in self.rank_lists:
            if rank in ranks:
                return ranks
        raise _NKIError("replica-group", f"{what}: rank {rank} (the calling program) is in no rank list of {self!r}")


def rank_id() -> int:
    """The rank of the calling program: its row-major index in the launch grid, plus the process's
    rank times the launch's programs in a torch.distributed job."""
    return _job.world().rank(_current().rank)


def self_index_in_replica_group(replica_group: ReplicaGroup, name: str | None = None) -> int:
    """The caller's position in its own rank list (rank 6 of ``[[0..3], [4..7]]`` -> 2)."""
    return _group(replica_group).members("nki.collectives.self_index_in_replica_group").index(rank_id())


# ----------------------------------------------------------------------------- plumbing
@_dataclass
class _Call:
    kind: str
    srcs: list[_Operand | _Snapshot]  # snapshots: the call of a rank of another process
    dsts: list[_Operand | _Snapshot]
    extra: Any = None

    def portable(self) -> _Call:
        """The call as the other processes of the job see it: the sources' values, the destinations' layouts."""
        extra = self.extra.portable() if isinstance(self.extra, _Metadata) else self.extra
        return _Call(self.kind, [o.snapshot(values=True) for o in self.srcs],
                     [o.snapshot(values=False) for o in self.dsts], extra)


def _group(replica_group: Any) -> ReplicaGroup:
    return replica_group if isinstance(replica_group, ReplicaGroup) else ReplicaGroup(replica_group)


def _operands(srcs: Any, dsts: Any, what: str, hbm_only: bool = False,
              single: bool = False) -> tuple[list[_Operand], list[_Operand]]:
    """The source and destination tensor lists: equally long, all on HBM or all in SBUF
    (one tensor each on SBUF: coalescing needs HBM)."""
    if not isinstance(srcs, (list, tuple)) or not isinstance(dsts, (list, tuple)):
        raise _NKIError("collective-operands", f"{what}: srcs and dsts are lists of tensors ([t], not t)")
    if not srcs or len(srcs) != len(dsts):
        raise _NKIError("collective-operands", f"{what}: srcs and dsts must be non-empty lists of the same length, "
                       f"got {len(srcs)} and {len(dsts)}")
    ins, outs = [_Operand.of(x, what) for x in srcs], [_Operand.of(x, what) for x in dsts]
    spaces = {o.space for o in ins + outs}
    if spaces - {"hbm", "sbuf"} or len(spaces) > 1 or (hbm_only and spaces != {"hbm"}):
        allowed = "HBM" if hbm_only else "all on HBM or all in SBUF"
        raise _NKIError("collective-operands", f"{what}: tensors must be {allowed}, got "
                       f"{sorted(s.upper() for s in spaces)}")
    if (single or spaces == {"sbuf"}) and len(ins) != 1:
        raise _NKIError("collective-operands", f"{what}: exactly one source and one destination tensor "
                       f"{'here' if single else 'on SBUF (coalesced collectives need HBM tensors)'}, got {len(ins)}")
    return ins, outs


def _collective(kind: str, replica_group: Any, ins: list[_Operand], outs: list[_Operand],
                complete: Callable[[tuple[int, ...], dict[int, _Call]], None], extra: Any = None,
                members: tuple[int, ...] | None = None) -> None:
    what = f"nki.collectives.{kind}"
    members = members if members is not None else _group(replica_group).members(what)
    world = _job.world()
    _cross_core.record(kind, ins + outs)

    def checked(arrivals: dict[int, _Call]) -> None:
        calls = {world.rank(program): call for program, call in arrivals.items()}
        if len(calls) < len(members):  # the rank list spans other processes
            calls.update(_job.exchange(world, members, {r: c.portable() for r, c in calls.items()}, what))
        shapes = {(c.kind, len(c.srcs)) for c in calls.values()}
        if len(shapes) > 1:
            raise _NKIError("collective-mismatch", f"{what}: the ranks {list(members)} issued different collectives "
                           f"at the same position: " + ", ".join(f"rank {r}: {c.kind} of {len(c.srcs)} tensor(s)"
                                                                 for r, c in sorted(calls.items())))
        complete(members, calls)

    _cross_core.meet("collective", world.local_programs(members), _Call(kind, ins, outs, extra), checked, what,
                     group=members)


def _gathered(members: tuple[int, ...], calls: dict[int, _Call], i: int, what: str) -> list[np.ndarray]:
    """Source `i` of every rank of the list, in rank-list order; they must agree in shape."""
    values = [calls[r].srcs[i].read() for r in members]
    if len({v.shape for v in values}) > 1:
        raise _NKIError("collective-shape", f"{what}: the ranks send tensors of different shapes: " + ", ".join(
            f"rank {r}: {v.shape}" for r, v in zip(members, values)))
    return values


def _check_dim(collective_dim: int, ins: list[_Operand], what: str, sbuf_dims: tuple[int, ...] = (0,)) -> int:
    allowed = sbuf_dims if ins[0].space == "sbuf" else (0,)
    if collective_dim not in allowed:
        raise _NKIError("collective-dim", f"{what}: collective_dim must be {' or '.join(map(str, allowed))} for "
                       f"{ins[0].space.upper()} tensors, got {collective_dim}")
    return int(collective_dim)


def _expect(out: _Operand, shape: tuple[int, ...], what: str) -> None:
    if out.shape != tuple(shape):
        raise _NKIError("collective-shape", f"{what}: dst has shape {out.shape}, expected {tuple(shape)}")


def _scaled(shape: tuple[int, ...], dim: int, factor: float) -> tuple[int, ...]:
    return tuple(int(s * factor) if d == dim else s for d, s in enumerate(shape))


def _list_size(replica_group: Any, what: str) -> int:
    return len(_group(replica_group).members(what))


# ----------------------------------------------------------------------------- collectives
def all_reduce(srcs: list, dsts: list, replica_group: ReplicaGroup, op: Any, priority: int | None = None,
               name: str | None = None) -> None:
    """Every rank of a rank list receives in ``dsts[i]`` the op-reduction of the ranks' ``srcs[i]``."""
    what = "nki.collectives.all_reduce"
    fn = _cross_core.reduce_op(op, what)
    ins, outs = _operands(srcs, dsts, what)
    for i, o in zip(ins, outs):
        _expect(o, i.shape, what)

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        for i in range(len(ins)):
            total = fn.reduce(np.stack(_gathered(members, calls, i, what)).astype(np.float32), axis=0)
            for r in members:
                calls[r].dsts[i].write(total, what)

    _collective("all_reduce", replica_group, ins, outs, complete)


def all_gather(srcs: list, dsts: list, replica_group: ReplicaGroup, collective_dim: int,
               priority: int | None = None, name: str | None = None) -> None:
    """``dsts[i]`` = the ranks' ``srcs[i]`` concatenated along `collective_dim` in rank-list order
    (0 on HBM; 0 or 1 for 2-D SBUF tiles)."""
    what = "nki.collectives.all_gather"
    ins, outs = _operands(srcs, dsts, what)
    dim = _check_dim(collective_dim, ins, what, sbuf_dims=(0, 1))
    n = _list_size(replica_group, what)
    for i, o in zip(ins, outs):
        _expect(o, _scaled(i.shape, dim, n), what)

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        for i in range(len(ins)):
            gathered = np.concatenate(_gathered(members, calls, i, what), axis=dim)
            for r in members:
                calls[r].dsts[i].write(gathered, what)

    _collective("all_gather", replica_group, ins, outs, complete)


def _split_evenly(ins: list[_Operand], outs: list[_Operand], dim: int, n: int, what: str) -> list:
    """The (src, dst) pairs, each src splitting into n equal parts along `dim`."""
    for i in ins:
        if i.shape[dim] % n:
            raise _NKIError("collective-shape", f"{what}: src dimension {dim} of size {i.shape[dim]} does not split "
                            f"into {n} equal parts")
    return list(zip(ins, outs))


def reduce_scatter(srcs: list, dsts: list, replica_group: ReplicaGroup, collective_dim: int, op: Any,
                   priority: int | None = None, name: str | None = None) -> None:
    """The op-reduction of the ranks' ``srcs[i]``, split in equal parts along `collective_dim` (0):
    the k-th rank of a rank list receives part k in ``dsts[i]``."""
    what = "nki.collectives.reduce_scatter"
    fn = _cross_core.reduce_op(op, what)
    ins, outs = _operands(srcs, dsts, what)
    dim = _check_dim(collective_dim, ins, what)
    n = _list_size(replica_group, what)
    for i, o in _split_evenly(ins, outs, dim, n, what):
        _expect(o, _scaled(i.shape, dim, 1 / n), what)

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        for i in range(len(ins)):
            total = fn.reduce(np.stack(_gathered(members, calls, i, what)).astype(np.float32), axis=0)
            for r, part in zip(members, np.split(total, len(members), axis=dim)):
                calls[r].dsts[i].write(part, what)

    _collective("reduce_scatter", replica_group, ins, outs, complete)


def all_to_all(srcs: list, dsts: list, replica_group: ReplicaGroup, collective_dim: int,
               priority: int | None = None, name: str | None = None) -> None:
    """Each rank splits ``srcs[i]`` in equal parts along `collective_dim` (0) and sends part k to
    the k-th rank of its list, which concatenates the parts it receives in rank-list order (HBM)."""
    what = "nki.collectives.all_to_all"
    ins, outs = _operands(srcs, dsts, what, hbm_only=True)
    dim = _check_dim(collective_dim, ins, what)
    n = _list_size(replica_group, what)
    for i, o in _split_evenly(ins, outs, dim, n, what):
        _expect(o, i.shape, what)

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        for i in range(len(ins)):
            parts = [np.split(v, len(members), axis=dim) for v in _gathered(members, calls, i, what)]
            for k, r in enumerate(members):
                calls[r].dsts[i].write(np.concatenate([p[k] for p in parts], axis=dim), what)

    _collective("all_to_all", replica_group, ins, outs, complete)


# ----------------------------------------------------------------------------- variable-length collectives
@_dataclass
class _Metadata:
    tensor: _Operand | _Snapshot
    rows: int
    recv_counts_known: bool
    has_rdispls: bool

    def read(self, n: int) -> np.ndarray:
        return self.tensor.read().reshape(self.rows, n).astype(np.int64)

    def portable(self) -> _Metadata:
        return _Metadata(self.tensor.snapshot(values=True), self.rows, self.recv_counts_known, self.has_rdispls)


def _metadata(metadata_tensor: Any, n: int, recv_counts_known: bool, has_rdispls: bool, what: str) -> _Metadata:
    """The uint32 counts/displacements tensor: (rows, n) on HBM or (1, rows, n) in SBUF, rows 3 or 4."""
    meta = _Operand.of(metadata_tensor, what)
    rows = 4 if has_rdispls else 3
    allowed = {(rows, n), (4, n)} if meta.space == "hbm" else {(1, rows, n), (1, 4, n)}
    if meta.dtype != np.dtype(np.uint32) or meta.shape not in allowed:
        raise _NKIError("collective-metadata", f"{what}: metadata_tensor must be uint32 of shape "
                       f"{sorted(allowed)[0]} (rows: send counts, send displacements, recv counts"
                       f"{', recv displacements' if has_rdispls else ''}; one column per rank of the list), got "
                       f"{meta.dtype} {meta.shape}")
    return _Metadata(meta, meta.shape[-2], bool(recv_counts_known), bool(has_rdispls))


def _variable(kind: str, srcs: list, dsts: list, replica_group: Any, metadata_tensor: Any, recv_counts_known: bool,
              has_rdispls: bool, send: Callable[[np.ndarray, int], tuple[int, int]]) -> None:
    """Flat-buffer exchange: ``send(sender metadata, receiver position) -> (count, displacement)``
    of the chunk a sender sends to a receiver; chunks land at the receiver's recv displacement
    (row 3), or at equal slots of ``dst.size / n`` without one; row 2 receives the counts unless
    `recv_counts_known`."""
    what = f"nki.collectives.{kind}"
    ins, outs = _operands(srcs, dsts, what, hbm_only=True, single=True)
    n = _list_size(replica_group, what)
    meta = _metadata(metadata_tensor, n, recv_counts_known, has_rdispls, what)

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        metas = {r: calls[r].extra.read(n) for r in members}
        sources = {r: calls[r].srcs[0].read().reshape(-1) for r in members}
        for p, r in enumerate(members):
            receiver = calls[r].extra
            flat = calls[r].dsts[0].read().reshape(-1)
            slot = flat.size // n
            for q, s in enumerate(members):
                count, displ = send(metas[s], p)
                offset = int(metas[r][3][q]) if receiver.has_rdispls else slot * q
                end = flat.size if receiver.has_rdispls else slot * (q + 1)
                if displ + count > sources[s].size or offset + count > end:
                    raise _NKIError("collective-bounds", f"{what}: rank {s} sends {count} elements from offset {displ} "
                                   f"of its {sources[s].size}-element src to offset {offset} of rank {r}'s dst, "
                                   f"which holds {end - offset} there")
                flat[offset:offset + count] = sources[s][displ:displ + count]
                metas[r][2][q] = count
            calls[r].dsts[0].write(flat.reshape(calls[r].dsts[0].shape), what)
            if not receiver.recv_counts_known:
                receiver.tensor.write(metas[r].reshape(receiver.tensor.shape), what)

    _collective(kind, replica_group, ins, outs, complete, extra=meta)


def all_to_all_v(srcs: list, dsts: list, replica_group: ReplicaGroup, metadata_tensor: Any,
                 recv_counts_known: bool = False, has_rdispls: bool = False, priority: int | None = None,
                 name: str | None = None) -> None:
    """All-to-all of flat element buffers with per-rank counts: rank s sends
    ``src[send_displs[k] : send_displs[k] + send_counts[k]]`` (metadata rows 0 and 1) to the k-th rank
    of its list."""
    _variable("all_to_all_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
              lambda meta, k: (int(meta[0][k]), int(meta[1][k])))


def all_gather_v(srcs: list, dsts: list, replica_group: ReplicaGroup, metadata_tensor: Any,
                 recv_counts_known: bool = False, has_rdispls: bool = False, priority: int | None = None,
                 name: str | None = None) -> None:
    """Variable-length all-gather of flat element buffers: every rank sends the one chunk
    ``src[send_displ : send_displ + send_count]`` (first column of metadata rows 0 and 1) to all."""
    _variable("all_gather_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
              lambda meta, _: (int(meta[0][0]), int(meta[1][0])))


# ----------------------------------------------------------------------------- permutes
def collective_permute(srcs: list, dsts: list, source_target_pairs: Sequence[tuple[int, int]],
                       priority: int | None = None, name: str | None = None) -> None:
    """Each ``(source, target)`` pair sends the source rank's ``srcs[0]`` to the target rank's
    ``dsts[0]`` (HBM). The ranks named in the pairs take part; a rank no pair targets gets zeros."""
    what = "nki.collectives.collective_permute"
    ins, outs = _operands(srcs, dsts, what, hbm_only=True, single=True)
    pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
    for side, ranks in (("source", [s for s, _ in pairs]), ("target", [t for _, t in pairs])):
        if len(set(ranks)) != len(ranks):
            raise _NKIError("collective-permute",
                            f"{what}: a rank is the {side} of more than one pair in {list(pairs)}")
    members = tuple(sorted({r for pair in pairs for r in pair}))
    if any(not 0 <= r < _job.world().size for r in members):
        raise _NKIError("replica-group", f"{what}: pairs {list(pairs)} name ranks outside {_job.world()}")
    if rank_id() not in members:
        raise _NKIError("replica-group", f"{what}: rank {rank_id()} (the calling program) is in no pair of "
                        f"{list(pairs)}")

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        if len({c.extra for c in calls.values()}) > 1:
            raise _NKIError("collective-mismatch", f"{what}: the ranks pass different source_target_pairs")
        values = {s: calls[s].srcs[0].read() for s, _ in pairs}
        sent_to = {t: s for s, t in pairs}
        for r in members:
            out = calls[r].dsts[0]
            out.write(values[sent_to[r]] if r in sent_to else np.zeros(out.shape, np.float32), what)

    _collective("collective_permute", None, ins, outs, complete, extra=pairs, members=members)


def _channels(by_channel: Sequence[Sequence[Any]], channel_ids: Sequence[int], what: str) -> list[Any]:
    if list(channel_ids) != list(range(len(by_channel))) or any(len(c) != 1 for c in by_channel):
        raise _NKIError("collective-channels", f"{what}: one list of exactly one tensor per channel, with "
                       f"channel_ids the consecutive integers 0..{len(by_channel) - 1}, got channel_ids "
                       f"{list(channel_ids)} and {[len(c) for c in by_channel]} tensor(s) per channel")
    return [c[0] for c in by_channel]


def _ring(kind: str, sources: list[list[Any]], dsts_by_channel: Sequence[Sequence[Any]], replica_group: Any,
          channel_ids: Sequence[int], combine: Callable[[list[np.ndarray]], np.ndarray]) -> None:
    """Each rank sends ``combine(its sources)`` of every channel to its successor in its rank list."""
    what = f"nki.collectives.{kind}"
    outs_raw = _channels(dsts_by_channel, channel_ids, what)
    ins_per_source = [_operands(_channels(s, channel_ids, what), outs_raw, what)[0] for s in sources]
    outs = _operands(_channels(sources[0], channel_ids, what), outs_raw, what)[1]
    for c, out in enumerate(outs):
        for ins in ins_per_source:
            _expect(out, ins[c].shape, what)
    flat_ins = [o for ins in ins_per_source for o in ins]

    def complete(members: tuple[int, ...], calls: dict[int, _Call]) -> None:
        per = len(outs)
        sent = {r: [combine([calls[r].srcs[k * per + c].read() for k in range(len(sources))]) for c in range(per)]
                for r in members}
        for p, r in enumerate(members):
            successor = members[(p + 1) % len(members)]
            for c in range(per):
                calls[successor].dsts[c].write(sent[r][c], what)

    _collective(kind, replica_group, flat_ins, outs, complete)


def collective_permute_implicit(srcs_by_channel: list, dsts_by_channel: list, replica_group: ReplicaGroup,
                                channel_ids: Sequence[int] = (0,), priority: int | None = None,
                                name: str | None = None) -> None:
    """Ring step: every rank sends its source of each channel to its successor in its rank list and
    receives its predecessor's into its destination."""
    _ring("collective_permute_implicit", [srcs_by_channel], dsts_by_channel, replica_group, channel_ids,
          lambda values: values[0])


def collective_permute_implicit_reduce(srcs0_by_channel: list, srcs1_by_channel: list, dsts_by_channel: list,
                                       replica_group: ReplicaGroup, op: Any, channel_ids: Sequence[int] = (0,),
                                       priority: int | None = None, name: str | None = None) -> None:
    """Ring step with reduction: every rank sends ``op(srcs0, srcs1)`` (fp32) of each channel to its
    successor, whose destination receives it."""
    fn = _cross_core.reduce_op(op, "nki.collectives.collective_permute_implicit_reduce")
    _ring("collective_permute_implicit_reduce", [srcs0_by_channel, srcs1_by_channel], dsts_by_channel,
          replica_group, channel_ids, lambda values: fn(*(v.astype(np.float32) for v in values)))


def collective_permute_implicit_current_processing_rank_id(iteration_id: int, replica_group: ReplicaGroup,
                                                           channel_id: int = 0, name: str | None = None) -> int:
    """The rank whose data a ring step holds at `iteration_id`: the caller's own at 0, then its
    predecessors' in turn (a Python int here, a scalar register on the device)."""
    ranks = _group(replica_group).members("nki.collectives.collective_permute_implicit_current_processing_rank_id")
    return ranks[(ranks.index(rank_id()) - int(iteration_id)) % len(ranks)]


__all__ = ["ReplicaGroup", "rg_partition_op", "rank_id", "self_index_in_replica_group", "all_reduce", "all_gather",
           "reduce_scatter", "all_to_all", "all_to_all_v", "all_gather_v", "collective_permute",
           "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id"]
