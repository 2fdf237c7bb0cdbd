"""The ``neuron`` c10d process group and its collectives.

Each process drives one simulated core; a collective moves the real bytes of device memory
between the processes. Device memory is host memory of the process, so the transport is Gloo
run on host aliases of the device tensors (:mod:`.host_views`): no copy to the host and back.
Ordering follows NCCL's model: a collective is a kernel on the process group's communication
stream of the tensors' core, queued after the kernels already on the issuing stream, and
``work.wait()`` makes the current stream wait for it (see :mod:`.work`). CPU tensors
(``"cpu:gloo,neuron:neuron"``, object collectives) go to Gloo directly.

Every collective's kernel has one shape (:meth:`NeuronProcessGroup._on_dense`): its outputs as
dense host tensors, the transport's move into them, AVG's divide (:mod:`.reductions`) and the
copy back into strided outputs; each collective states its move.

PyTorch 2.13 cannot construct a Python ``c10d.Backend``, so this is a Python ``ProcessGroup``
returned by the backend's creator (torch keeps it as the group); see docs/distributed.md.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .. import _C
from . import agreement, rng_tracker
from .eager_frames import never_traced
from .host_views import Contiguous, alias, write_pieces
from .peers import Peers
from .reductions import Reduction, allreduce_options, reduce_scatter_options, reduction
from .shared_memory import MAX_ALL_TO_ALL_RANKS, SharedMemoryLink, supports
from .traffic import collective_message
from .work import DeferredWork, DoneWork, NeuronWork

# One communication stream per core, shared by every process group of the process: a core runs
# one kernel at a time and a collective's kernel waits for its peers, so collectives must run in
# the order they were issued (NCCL's rule for overlapping communicators, made strict), or two
# ranks could each wait inside a different group's collective.
_COMM_STREAMS: dict[int, torch.Stream] = {}
# Long enough for a Gloo worker waiting for the interpreter lock to take it (see shutdown).
_GLOO_SETTLE_SECONDS = 0.02


@never_traced
class NeuronProcessGroup(dist.ProcessGroup):
    """A process group over ``size`` processes, each driving its own neuron core."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta, group_name: str) -> None:
        super().__init__(rank, size)
        self._name, self._store, self._timeout = group_name, store, timeout
        self._splits = 0
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        # Ranks on this host move the bytes of the main collectives through shared memory.
        self._peers = Peers(store, rank, size)
        self._link = SharedMemoryLink.connect(store, self._peers.key, rank, size, timeout,
                                              one_host=not self._peers.remote)

    # -- identity (the C++ base keeps a name only for groups with C++ backends)
    def getBackendName(self) -> str:
        return "neuron"

    @property
    def group_name(self) -> str:
        return self._name

    @property
    def group_desc(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"NeuronProcessGroup(rank={self.rank()}, size={self.size()})"

    def name(self) -> str:
        return "neuron"

    def get_group_store(self) -> dist.Store:
        return self._store

    # -- the group as its own backend: torch asks a group for its backend on a device (with
    # ``init_process_group(device_id=...)``, ``split_group``, DeviceMesh, new_group); a C++
    # group keeps one per device type, this one is the neuron backend and Gloo the CPU's.
    def _get_backend(self, device: torch.device) -> Any:
        kind = torch.device(device).type
        if kind == "neuron":
            return self
        if kind == "cpu":
            return self._gloo
        raise RuntimeError(f"No backend type associated with device type {kind} (the neuron process group "
                           "runs neuron tensors, and CPU tensors through Gloo)")

    @property
    def supports_splitting(self) -> bool:
        return True

    @property
    def supports_coalescing(self) -> bool:
        return False

    @property
    def supports_time_estimate(self) -> bool:
        return False

    @property
    def options(self) -> None:
        return None

    def supports_tensor_alloc(self, device: torch.device) -> bool:
        return False

    def eager_connect_single_device(self, device: torch.device | None) -> None:
        """Nothing to connect: Gloo and the shared-memory link connect when the group is made."""

    def perform_nocolor_split(self, device: torch.device) -> None:
        """A rank outside a group being split off takes no part (NCCL's ranks must)."""

    def _set_sequence_number_for_group(self) -> None:
        """Gloo keeps its own sequence numbers."""

    def comm_split_count(self) -> int:
        return self._splits

    def split_group(self, new_ranks: list[int], timeout: timedelta | None = None, opts: Any = None,
                    group_name: str | None = None, group_desc: str | None = None,
                    device_types: list[torch.device] | None = None) -> NeuronProcessGroup | None:
        """``dist.split_group`` (and DeviceMesh's sub-meshes once a device is bound): a group of
        this group's ranks ``new_ranks`` (sorted), connected through this group's store; None on
        the ranks outside it, which take no part."""
        self._splits += 1
        if self.rank() not in new_ranks:
            return None
        name = group_name or f"{self._name}:split:{self._splits}"
        store = dist.PrefixStore(f"{name}/", self._store)
        return NeuronProcessGroup(store, sorted(new_ranks).index(self.rank()), len(new_ranks),
                                  timeout or self._timeout, name)

    # -- the launch of one collective
    @staticmethod
    def _stream(device: int) -> torch.Stream:
        if device not in _COMM_STREAMS:
            _COMM_STREAMS[device] = torch.neuron.Stream(device=device)
        return _COMM_STREAMS[device]

    def _run(self, name: str, tensors: Sequence[torch.Tensor], outputs: list[torch.Tensor],
             body: Callable[[], None], agree: Sequence[torch.Tensor] | None = None, root: int = -1,
             linked: bool = False) -> dist.Work:
        """Queue ``body`` (on host aliases) on the communication stream of the tensors' core,
        after the work queued so far on the issuing stream. ``agree``: the tensors whose dtype and
        sizes every rank must pass alike (checked first: Gloo aborts the process on a size
        mismatch); ``linked``: the body moves the bytes through the shared-memory link."""
        devices = {t.device for t in tensors}
        if len(devices) != 1:
            raise ValueError(f"{name}: every tensor must be on one device, got {sorted(map(str, devices))}")
        (device,) = devices
        if device.type != "neuron":
            raise AssertionError("CPU tensors go to Gloo")
        index = device.index
        comm = self._stream(index)
        comm.wait_stream(torch.neuron.current_stream(index))
        future: torch.futures.Future = torch.futures.Future()
        label = f"c10d::{name} (rank {self.rank()} of {self.size()})"

        signature = None if agree is None else agreement.signature(name, agree, root)
        described = collective_message(name, self.size(), tensors, outputs, linked) if _C._profiler_recording() else ""

        def kernel() -> None:
            try:
                if signature is not None:
                    agreement.verify(name, signature, self._link, self._gloo)
                body()
            except Exception as error:
                message = f"{label} on neuron:{index} failed: {error}"
                if "rank(s)" not in message:  # Gloo tells of a closed connection, not whose
                    dead = self._peers.describe_exited()
                    message += f" ({dead})" if dead else ""
                future.set_exception(RuntimeError(message))
                raise RuntimeError(message) from error
            future.set_result(outputs)

        with torch.neuron.stream(comm):
            _C._launch_python_kernel(index, kernel, label, wait=False, described=described)
            done = comm.record_event()
        return NeuronWork(label, done, future, outputs)

    def _host(self) -> dist.ProcessGroup:
        """Gloo for an operation issued from the calling thread (CPU tensors, barriers): first
        the collectives already queued on the communication streams are issued, so every rank
        hands Gloo its operations in program order (Gloo pairs them by order)."""
        for stream in _COMM_STREAMS.values():
            stream.synchronize()
        return self._gloo

    def shutdown(self) -> None:
        """``destroy_process_group``: the queued collectives finish, then Gloo's worker threads
        get a moment with the interpreter lock. In PyTorch 2.13 a Gloo worker drops its last
        reference to a finished operation (and to the tensors it holds) just after the caller's
        ``wait`` returns; when that happens during interpreter exit the process aborts
        ("terminate called without an active exception", also with the plain ``gloo`` backend).
        Not a collective: a dead peer cannot make it block."""
        self._peers.leave()
        self._host()
        time.sleep(_GLOO_SETTLE_SECONDS)

    # -- collectives
    def _on_neuron(self, tensors: Sequence[torch.Tensor]) -> bool:
        return any(t.device.type == "neuron" for t in tensors)

    def _on_dense(self, outputs: Sequence[torch.Tensor], move: Callable[[list[torch.Tensor]], object],
                  red: Reduction | None = None, write_back: bool = True) -> None:
        """The shape of a collective's kernel: ``move`` (the transport) writes the dense host
        views of ``outputs``, which then get AVG's divide and go back into strided outputs (not
        where ``write_back`` is false: a non-root rank of a reduce keeps its input)."""
        views = [Contiguous(t) for t in outputs]
        move([v.dense for v in views])
        if not write_back:
            return
        for v in views:
            if red is not None:
                red.finish(v.dense, self.size())
            v.finish()

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceOptions()
        if not self._on_neuron(tensors):
            return self._host().allreduce(tensors, opts)
        red = reduction(opts.reduceOp, tensors, "all_reduce")
        linked = self._link is not None and all(supports(red.op, t) for t in tensors)

        def move(dense: list[torch.Tensor]) -> None:
            if red.factor is not None:  # in place: the result overwrites the input anyway
                for d in dense:
                    d.mul_(red.factor)
            if linked:
                for d in dense:
                    self._link.all_reduce(d, red.op)
            else:
                self._gloo.allreduce(dense, allreduce_options(red.op, opts.timeout)).wait()
        return self._run("all_reduce", tensors, tensors, lambda: self._on_dense(tensors, move, red), agree=tensors,
                         linked=linked)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceCoalescedOptions()
        works = [self.allreduce([t], allreduce_options(opts.reduceOp, opts.timeout)) for t in tensors]
        return works[-1] if works else self.barrier()

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.BroadcastOptions()
        if not self._on_neuron(tensors):
            return self._host().broadcast(tensors, opts)
        linked = self._link is not None

        def move(dense: list[torch.Tensor]) -> None:
            if linked:
                for d in dense:
                    self._link.broadcast(d, opts.rootRank)
            else:
                self._gloo.broadcast(dense, opts).wait()
        return self._run("broadcast", tensors, tensors, lambda: self._on_dense(tensors, move), agree=tensors,
                         root=opts.rootRank, linked=linked)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceOptions()
        if not self._on_neuron(tensors):
            return self._host().reduce(tensors, opts)
        red = reduction(opts.reduceOp, tensors, "reduce")
        gloo_opts = dist.ReduceOptions()
        gloo_opts.reduceOp, gloo_opts.rootRank, gloo_opts.rootTensor = red.op, opts.rootRank, opts.rootTensor
        gloo_opts.timeout = opts.timeout
        root = self.rank() == opts.rootRank

        def move(dense: list[torch.Tensor]) -> None:
            sources = [red.scaled(d) for d in dense]  # PREMUL_SUM: copies, non-roots keep theirs
            self._gloo.reduce(sources, gloo_opts).wait()
            for d, source in zip(dense, sources):
                if root and source is not d:
                    d.copy_(source)
        return self._run("reduce", tensors, tensors, lambda: self._on_dense(tensors, move, red, write_back=root),
                         agree=tensors, root=opts.rootRank)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllgatherOptions()
        flat = [t for group in outputs for t in group]
        if not self._on_neuron([*inputs, *flat]):
            return self._host().allgather(outputs, inputs, opts)
        linked = self._link is not None and _uniform(inputs, flat)

        def body() -> None:
            for group, source in zip(outputs, inputs, strict=True):
                if linked:  # into one buffer, then to the list
                    whole = torch.empty((self.size(), source.numel()), dtype=source.dtype)
                    self._link.gather(whole, alias(source).contiguous())
                    write_pieces(whole, group)
                else:
                    self._on_dense(group, lambda dense: self._gloo.allgather([dense], [alias(source).contiguous()],
                                                                             opts).wait())
        return self._run("all_gather", [*inputs, *flat], flat, body, agree=[*inputs, *flat], linked=linked)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or dist.AllgatherOptions()
        if not self._on_neuron([output, input]):
            return self._host()._allgather_base(output, input, opts)
        _check_sizes("all_gather_into_tensor", output, input, self.size())
        linked = self._link is not None

        def move(dense: list[torch.Tensor]) -> None:
            if linked:
                self._link.gather(dense[0], alias(input).contiguous())
            else:
                self._gloo._allgather_base(dense[0], alias(input).contiguous(), opts).wait()
        return self._run("all_gather_into_tensor", [output, input], [output], lambda: self._on_dense([output], move),
                         agree=[output, input], linked=linked)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> dist.Work:
        return _each(self._allgather_base, outputs, inputs, opts)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> dist.Work:
        """``outputs[r][i]`` receives input ``i`` of rank ``r``: one all-gather per input."""
        opts = opts or dist.AllgatherOptions()
        if not self._on_neuron([*inputs, *(t for group in outputs for t in group)]):
            return self._host().allgather_coalesced(outputs, inputs, opts)
        per_input = [[group[i] for group in outputs] for i in range(len(inputs))]
        return _each(lambda o, i, opts: self.allgather([o], [i], opts), per_input, inputs, opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        flat = [t for group in inputs for t in group]
        if not self._on_neuron([*outputs, *flat]):
            return self._host().reduce_scatter(outputs, inputs, opts)
        red = reduction(opts.reduceOp, flat, "reduce_scatter")
        gloo_opts = reduce_scatter_options(red.op, opts.timeout)
        linked = self._link is not None and _uniform(outputs, flat) and all(supports(red.op, t) for t in outputs)

        def move(dense: list[torch.Tensor], group: list[torch.Tensor]) -> None:
            if linked:  # the list as one buffer (a copy: the caller's inputs are kept)
                whole = red.scaled(torch.stack([alias(t).reshape(-1) for t in group]))
                self._link.reduce_scatter(dense[0], whole, red.op)
            else:
                sources = [red.scaled(alias(t).contiguous()) for t in group]
                self._gloo.reduce_scatter(dense, [sources], gloo_opts).wait()

        def body() -> None:
            for output, group in zip(outputs, inputs, strict=True):
                self._on_dense([output], lambda dense: move(dense, group), red)
        return self._run("reduce_scatter", [*outputs, *flat], outputs, body, agree=[*outputs, *flat],
                         linked=linked)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        if not self._on_neuron([output, input]):
            return self._host()._reduce_scatter_base(output, input, opts)
        _check_sizes("reduce_scatter_tensor", input, output, self.size())
        red = reduction(opts.reduceOp, [input], "reduce_scatter_tensor")
        gloo_opts = reduce_scatter_options(red.op, opts.timeout)
        linked = self._link is not None and supports(red.op, output)

        def move(dense: list[torch.Tensor]) -> None:
            source = alias(input).contiguous()
            scaled = red.scaled(source)
            if linked:
                self._link.reduce_scatter(dense[0], scaled, red.op)
            else:
                # Gloo reduces in place into its input: work on a copy, the caller's input is kept.
                self._gloo._reduce_scatter_base(dense[0], scaled if scaled is not source else source.clone(),
                                                gloo_opts).wait()
        return self._run("reduce_scatter_tensor", [output, input], [output],
                         lambda: self._on_dense([output], move, red), agree=[output, input], linked=linked)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> dist.Work:
        return _each(self._reduce_scatter_base, outputs, inputs, opts)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def _all_to_all_linked(self) -> bool:
        return self._link is not None and self.size() <= MAX_ALL_TO_ALL_RANKS

    def _all_to_all_flat(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                         input_splits: list[int], linked: bool, opts: Any) -> None:
        """Piece r of the flat host tensor ``input`` to rank r (splits in elements)."""
        if linked:
            self._link.all_to_all(output, input, output_splits, input_splits)
        else:
            self._gloo.alltoall_base(output, input, output_splits, input_splits, opts).wait()

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                      input_split_sizes: list[int], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllToAllOptions()
        if not self._on_neuron([output, input]):
            return self._host().alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
        linked = self._all_to_all_linked()

        def move(dense: list[torch.Tensor]) -> None:
            self._all_to_all_flat(dense[0].view(-1), alias(input).contiguous().view(-1),
                                  _element_splits(output, output_split_sizes, self.size()),
                                  _element_splits(input, input_split_sizes, self.size()), linked, opts)
        return self._run("all_to_all_single", [output, input], [output], lambda: self._on_dense([output], move),
                         agree=[], linked=linked)

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> dist.Work:
        """The lists as one flat buffer each (their tensors may differ in size, as with NCCL)."""
        opts = opts or dist.AllToAllOptions()
        if not self._on_neuron([*outputs, *inputs]):
            return self._host().alltoall(outputs, inputs, opts)
        linked = self._all_to_all_linked()

        def body() -> None:
            sizes = [t.numel() for t in outputs]
            whole = torch.empty(sum(sizes), dtype=outputs[0].dtype)
            self._all_to_all_flat(whole, torch.cat([alias(t).reshape(-1) for t in inputs]), sizes,
                                  [t.numel() for t in inputs], linked, opts)
            write_pieces(whole.split(sizes), outputs)
        return self._run("all_to_all", [*outputs, *inputs], outputs, body, agree=[], linked=linked)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.GatherOptions()
        flat = [t for group in outputs for t in group]
        if not self._on_neuron([*inputs, *flat]):
            return self._host().gather(outputs, inputs, opts)
        destinations = outputs if self.rank() == opts.rootRank else []  # as for scatter
        linked = self._link is not None and len(inputs) == 1

        def linked_body() -> None:  # into one buffer on the root, then to the list
            source = alias(inputs[0]).contiguous()
            whole = torch.empty((self.size(), source.numel()), dtype=source.dtype) if destinations else None
            self._link.gather(whole, source)
            for group in destinations:
                write_pieces(whole, group)

        def move(dense: list[torch.Tensor]) -> None:
            pieces = iter(dense)
            self._gloo.gather([[next(pieces) for _ in group] for group in destinations],
                              [alias(t).contiguous() for t in inputs], opts).wait()
        body = linked_body if linked else lambda: self._on_dense([t for group in destinations for t in group], move)
        return self._run("gather", [*inputs, *flat], flat, body, agree=inputs, root=opts.rootRank, linked=linked)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> dist.Work:
        opts = opts or dist.ScatterOptions()
        flat = [t for group in inputs for t in group]
        if not self._on_neuron([*outputs, *flat]):
            return self._host().scatter(outputs, inputs, opts)
        # Only the root's list is read (Gloo refuses one on the other ranks; DTensor passes it on all).
        sources = inputs if self.rank() == opts.rootRank else []
        linked = self._link is not None and len(outputs) == 1

        def move(dense: list[torch.Tensor]) -> None:
            if linked:  # from one buffer on the root
                whole = torch.stack([alias(t).reshape(-1) for t in sources[0]]) if sources else None
                self._link.scatter(dense[0], whole, opts.rootRank)
            else:
                self._gloo.scatter(dense, [[alias(t).contiguous() for t in group] for group in sources], opts).wait()
        return self._run("scatter", [*outputs, *flat], outputs, lambda: self._on_dense(outputs, move), agree=outputs,
                         root=opts.rootRank, linked=linked)

    def barrier(self, opts: Any = None) -> dist.Work:
        """Blocks until every rank reached it, after this process's queued device work."""
        if torch.neuron.is_initialized():
            torch.neuron.synchronize()
        return self._host().barrier(opts or dist.BarrierOptions())

    def monitored_barrier(self, timeout: timedelta | None = None, wait_all_ranks: bool = False) -> None:
        args = (timeout,) if timeout is not None else ()
        self._host().monitored_barrier(*args, wait_all_ranks=wait_all_ranks)

    # -- point to point: posted by a kernel, waited for by the stream at work.wait()
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        if not self._on_neuron(tensors):
            return self._host().send(tensors, dst, tag)
        return self._p2p("send", tensors, lambda dense: self._gloo.send(dense, dst, tag), dst, copy_back=False)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        if not self._on_neuron(tensors):
            return self._host().recv(tensors, src, tag)
        return self._p2p("recv", tensors, lambda dense: self._gloo.recv(dense, src, tag), src, copy_back=True)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> dist.Work:
        if not self._on_neuron(tensors):
            return self._host().recv_anysource(tensors, tag)
        return self._p2p("recv", tensors, lambda dense: self._gloo.recv_anysource(dense, tag), -1, copy_back=True)

    def _p2p(self, name: str, tensors: list[torch.Tensor], post: Callable[[list[torch.Tensor]], dist.Work],
             peer: int, *, copy_back: bool) -> dist.Work:
        """A send or receive is posted to Gloo by a kernel on the communication stream without
        waiting for the peer (so a rank may post its receive before its send, as with
        ``batch_isend_irecv``); ``work.wait()`` queues the wait for its completion."""
        posted: list[tuple[dist.Work, list[Contiguous]]] = []

        def post_kernel() -> None:
            views = [Contiguous(t) for t in tensors]
            posted.append((post([v.dense for v in views]), views))

        self._run(f"{name} (peer {peer}) post", tensors, tensors, post_kernel)

        def complete() -> None:
            work, views = posted[0]
            work.wait()
            if copy_back:
                for v in views:
                    v.finish()
        return DeferredWork(lambda: self._run(f"{name} (peer {peer})", tensors, tensors, complete))

    # -- coalescing (``_coalescing_manager``, ``batch_isend_irecv``): ops run as issued
    def _start_coalescing(self, device: torch.device) -> None:
        """Operations inside a coalescing block are queued one by one, in order."""

    def _end_coalescing(self, device: torch.device) -> dist.Work:
        return self.barrier() if device.type != "neuron" else DoneWork()


def _each(collective: Callable[..., dist.Work], outputs: Sequence[Any], inputs: Sequence[Any],
          opts: Any) -> dist.Work:
    """A coalesced form: one collective per (output, input) pair, queued in order on the one
    communication stream, so waiting for the last waits for all."""
    works = [collective(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]
    return works[-1]


def _uniform(inputs: Sequence[torch.Tensor], pieces: Sequence[torch.Tensor]) -> bool:
    """Whether every piece of a list-form collective has the size and dtype of the tensors it
    pairs with (so the list is one buffer of ``size`` rows)."""
    return len(inputs) > 0 and all(p.numel() == inputs[0].numel() and p.dtype == inputs[0].dtype
                                   for p in [*inputs, *pieces])


def _element_splits(t: torch.Tensor, rows: list[int], size: int) -> list[int]:
    """``all_to_all_single``'s split sizes (rows of dim 0; none: even) in elements."""
    per_row = math.prod(t.shape[1:])
    return [r * per_row for r in rows] if rows else [t.shape[0] // size * per_row] * size


def _check_sizes(name: str, whole: torch.Tensor, part: torch.Tensor, size: int) -> None:
    if whole.numel() != part.numel() * size or whole.dtype != part.dtype:
        raise ValueError(f"{name} on neuron: the larger tensor must hold group size ({size}) x the smaller "
                         f"of the same dtype, got {tuple(whole.shape)} {whole.dtype} and "
                         f"{tuple(part.shape)} {part.dtype}")


def select_local_device() -> None:
    """A process still on its default device takes ``neuron:<LOCAL_RANK>`` (modulo the devices it
    sees) when its first group is made. Launchers that only read the current device rely on it:
    Accelerate's multi-process state takes ``torch.neuron.current_device()`` as the rank's device
    while its DDP wrapper uses ``device_ids=[local_rank]``. A device chosen before is kept."""
    local, count = os.environ.get("LOCAL_RANK"), _C._device_count()
    if local is not None and count and _C._current_device() == 0:
        _C._set_device(int(local) % count)


def create(options: Any, backend_options: Any) -> NeuronProcessGroup:
    """The backend's creator (``Backend.register_backend(..., extended_api=True)``)."""
    select_local_device()
    rng_tracker.install()
    return NeuronProcessGroup(options.store, options.group_rank, options.group_size, options.timeout,
                              options.group_id)
