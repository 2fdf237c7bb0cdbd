"""The ``neuron`` c10d process group.

Each process drives one simulated core; a collective moves the real bytes of device memory
between the processes. Device memory is host memory of the process, so the transport is Gloo
run on host aliases of the device tensors (:func:`torch_neuronx._C._host_alias`): no copy to
the host and back. Ordering follows NCCL's model: a collective is a kernel on the process
group's communication stream of the tensors' core, queued after the kernels already on the
issuing stream, and ``work.wait()`` makes the current stream wait for it (see :mod:`.work`).
CPU tensors (``"cpu:gloo,neuron:neuron"``, object collectives) go to Gloo directly.

PyTorch 2.13 cannot construct a Python ``c10d.Backend``, so this is a Python ``ProcessGroup``
returned by the backend's creator (torch keeps it as the group); see docs/distributed.md.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .. import _C
from . import rng_tracker
from .eager_frames import never_traced
from .peers import Peers
from .shared_memory import MAX_ALL_TO_ALL_RANKS, SharedMemoryLink, supports
from .traffic import traffic
from .work import NeuronWork

_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# One communication stream per core, shared by every process group of the process: a core runs
# one kernel at a time and a collective's kernel waits for its peers, so collectives must run in
# the order they were issued (NCCL's rule for overlapping communicators, made strict), or two
# ranks could each wait inside a different group's collective.
_COMM_STREAMS: dict[int, torch.Stream] = {}
# Long enough for a Gloo worker waiting for the interpreter lock to take it (see shutdown).
_GLOO_SETTLE_SECONDS = 0.02


def _alias(t: torch.Tensor) -> torch.Tensor:
    return _C._host_alias(t) if t.device.type == "neuron" else t


class _Contiguous:
    """A host view Gloo can use (Gloo needs dense tensors): the alias itself, or a contiguous
    copy written back by :meth:`finish` for a strided view."""

    def __init__(self, t: torch.Tensor) -> None:
        self.target = _alias(t)
        self.dense = self.target if self.target.is_contiguous() else self.target.contiguous()

    def finish(self) -> None:
        if self.dense is not self.target:
            self.target.copy_(self.dense)


class _Reduction(NamedTuple):
    """A c10d reduce op as run here: the op the transport applies, whether the result is then
    divided by the group size (AVG: Gloo has none) and a factor the inputs are first multiplied
    by (PREMUL_SUM)."""

    op: ReduceOp.RedOpType
    average: bool = False
    factor: float | torch.Tensor | None = None

    def scaled(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` times the PREMUL_SUM factor (a new tensor), or ``t`` itself."""
        return t if self.factor is None else t * self.factor

    def finish(self, t: torch.Tensor, size: int) -> None:
        if self.average:
            t.div_(size)


def _reduction(op: Any, tensors: Sequence[torch.Tensor], where: str) -> _Reduction:
    """How ``op`` runs: Gloo has no AVG (a SUM divided) and no PREMUL_SUM (a SUM of the scaled
    inputs); both need floating-point tensors, as with NCCL."""
    kind = op.op if hasattr(op, "op") else op
    if kind not in (ReduceOp.AVG, ReduceOp.PREMUL_SUM):
        return _Reduction(kind)
    if any(t.dtype not in _FLOATING for t in tensors):
        raise ValueError(f"{where} on neuron: ReduceOp.{kind.name} needs floating-point tensors, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    if kind == ReduceOp.AVG:
        return _Reduction(ReduceOp.SUM, average=True)
    factor = op.factor
    return _Reduction(ReduceOp.SUM, factor=_alias(factor) if isinstance(factor, torch.Tensor) else factor)


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

        signature = None if agree is None else _signature(name, agree, root)
        described = self._message(name, tensors, outputs, linked) if _C._profiler_recording() else ""

        def kernel() -> None:
            try:
                if signature is not None:
                    self._verify(name, signature)
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

    def _message(self, name: str, tensors: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                 linked: bool) -> str:
        """The collective's message for the profiler (torch_neuronx/profiling): its size as
        nccl-tests counts it (the larger of what a rank passes in and gets out), the bus factor
        and ring steps of its algorithm, and the transport; empty for a point-to-point wait."""
        base = name.split(" (")[0]
        if name.endswith(")") and not name.endswith("post"):
            return ""  # the wait for a posted send or receive moves nothing
        n = self.size()
        bus, steps = traffic(base, n)
        out_ids = {id(t) for t in outputs}
        written = sum(t.nbytes for t in outputs)
        read = sum(t.nbytes for t in tensors if id(t) not in out_ids) or written
        return json.dumps({"collective": base, "group_size": n, "bytes": max(read, written),
                           "dtype": str(tensors[0].dtype).removeprefix("torch.") if tensors else None,
                           "bus_factor": bus, "ring_steps": steps,
                           "transport": "shared_memory" if linked else "gloo"})

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

    def _verify(self, name: str, signature: list[int]) -> None:
        """Every rank passes the same signature, or all raise: through the shared-memory link
        (which shows every rank's), or one small Gloo all-reduce (the maximum of the values and
        of their negations)."""
        if self._link is not None:
            table = self._link.agree(signature)
            if table is not None:
                ranks = "; ".join(f"rank {r}: {_describe(row)}" for r, row in enumerate(table))
                raise ValueError(f"the ranks called {name} with different collectives, dtypes, sizes or roots "
                                 f"({ranks})")
            return
        both = torch.tensor(signature + [-v for v in signature], dtype=torch.int64)
        self._gloo.allreduce([both], _allreduce_opts(ReduceOp.MAX, timedelta(minutes=30))).wait()
        highest, lowest = both[: len(signature)].tolist(), [-v for v in both[len(signature):].tolist()]
        if highest != lowest:
            raise ValueError(f"the ranks called {name} with different collectives, dtypes, sizes or roots "
                             f"(this rank: {_describe(signature)}; the ranks range from {_describe(lowest)} "
                             f"to {_describe(highest)})")

    def _on_neuron(self, tensors: Sequence[torch.Tensor]) -> bool:
        return any(t.device.type == "neuron" for t in tensors)

    # -- collectives
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceOptions()
        if not self._on_neuron(tensors):
            return self._host().allreduce(tensors, opts)
        red = _reduction(opts.reduceOp, tensors, "all_reduce")
        linked = self._link is not None and all(supports(red.op, t) for t in tensors)

        def body() -> None:
            views = [_Contiguous(t) for t in tensors]
            if red.factor is not None:  # in place: the result overwrites the input anyway
                for v in views:
                    v.dense.mul_(red.factor)
            if linked:
                for v in views:
                    self._link.all_reduce(v.dense, red.op)
            else:
                self._gloo.allreduce([v.dense for v in views], _allreduce_opts(red.op, opts.timeout)).wait()
            for v in views:
                red.finish(v.dense, self.size())
                v.finish()
        return self._run("all_reduce", tensors, tensors, body, agree=tensors, linked=linked)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.AllreduceCoalescedOptions()
        works = [self.allreduce([t], _allreduce_opts(opts.reduceOp, opts.timeout)) for t in tensors]
        return works[-1] if works else self.barrier()

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.BroadcastOptions()
        if not self._on_neuron(tensors):
            return self._host().broadcast(tensors, opts)
        linked = self._link is not None

        def body() -> None:
            views = [_Contiguous(t) for t in tensors]
            if linked:
                for v in views:
                    self._link.broadcast(v.dense, opts.rootRank)
            else:
                self._gloo.broadcast([v.dense for v in views], opts).wait()
            for v in views:
                v.finish()
        return self._run("broadcast", tensors, tensors, body, agree=tensors, root=opts.rootRank, linked=linked)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceOptions()
        if not self._on_neuron(tensors):
            return self._host().reduce(tensors, opts)
        red = _reduction(opts.reduceOp, tensors, "reduce")
        gloo_opts = dist.ReduceOptions()
        gloo_opts.reduceOp, gloo_opts.rootRank, gloo_opts.rootTensor = red.op, opts.rootRank, opts.rootTensor
        gloo_opts.timeout = opts.timeout

        def body() -> None:
            views = [_Contiguous(t) for t in tensors]
            sources = [red.scaled(v.dense) for v in views]  # PREMUL_SUM: copies, non-roots keep theirs
            self._gloo.reduce(sources, gloo_opts).wait()
            if self.rank() != opts.rootRank:
                return
            for v, source in zip(views, sources):
                if source is not v.dense:
                    v.dense.copy_(source)
                red.finish(v.dense, self.size())
                v.finish()
        return self._run("reduce", tensors, tensors, body, agree=tensors, root=opts.rootRank)

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
                    self._link.gather(whole, _alias(source).contiguous())
                    for piece, t in zip(whole, group):
                        _alias(t).copy_(piece.view(t.shape))
                else:
                    views = [_Contiguous(t) for t in group]
                    self._gloo.allgather([[v.dense for v in views]], [_alias(source).contiguous()], opts).wait()
                    for v in views:
                        v.finish()
        return self._run("all_gather", [*inputs, *flat], flat, body, agree=[*inputs, *flat], linked=linked)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or dist.AllgatherOptions()
        if not self._on_neuron([output, input]):
            return self._host()._allgather_base(output, input, opts)
        _check_sizes("all_gather_into_tensor", output, input, self.size())
        linked = self._link is not None

        def body() -> None:
            out, inp = _Contiguous(output), _Contiguous(input)
            if linked:
                self._link.gather(out.dense, inp.dense)
            else:
                self._gloo._allgather_base(out.dense, inp.dense, opts).wait()
            out.finish()
        return self._run("all_gather_into_tensor", [output, input], [output], body, agree=[output, input],
                         linked=linked)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> dist.Work:
        return _each(self._allgather_base, outputs, inputs, opts)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> dist.Work:
        return _each(lambda o, i, opts: self.allgather([o], [i], opts), outputs, inputs, opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        flat = [t for group in inputs for t in group]
        if not self._on_neuron([*outputs, *flat]):
            return self._host().reduce_scatter(outputs, inputs, opts)
        red = _reduction(opts.reduceOp, flat, "reduce_scatter")
        gloo_opts = _reduce_scatter_opts(red.op, opts.timeout)
        linked = self._link is not None and _uniform(outputs, flat) and all(supports(red.op, t) for t in outputs)

        def body() -> None:
            for output, group in zip(outputs, inputs, strict=True):
                out = _Contiguous(output)
                if linked:  # the list as one buffer (a copy: the caller's inputs are kept)
                    whole = red.scaled(torch.stack([_alias(t).reshape(-1) for t in group]))
                    self._link.reduce_scatter(out.dense, whole, red.op)
                else:
                    sources = [red.scaled(_alias(t).contiguous()) for t in group]
                    self._gloo.reduce_scatter([out.dense], [sources], gloo_opts).wait()
                red.finish(out.dense, self.size())
                out.finish()
        return self._run("reduce_scatter", [*outputs, *flat], outputs, body, agree=[*outputs, *flat],
                         linked=linked)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        if not self._on_neuron([output, input]):
            return self._host()._reduce_scatter_base(output, input, opts)
        _check_sizes("reduce_scatter_tensor", input, output, self.size())
        red = _reduction(opts.reduceOp, [input], "reduce_scatter_tensor")
        gloo_opts = _reduce_scatter_opts(red.op, opts.timeout)
        linked = self._link is not None and supports(red.op, output)

        def body() -> None:
            out = _Contiguous(output)
            source = _alias(input).contiguous()
            scaled = red.scaled(source)
            if linked:
                self._link.reduce_scatter(out.dense, scaled, red.op)
            else:
                # Gloo reduces in place into its input: work on a copy, the caller's input is kept.
                self._gloo._reduce_scatter_base(out.dense, scaled if scaled is not source else source.clone(),
                                                gloo_opts).wait()
            red.finish(out.dense, self.size())
            out.finish()
        return self._run("reduce_scatter_tensor", [output, input], [output], body, agree=[output, input],
                         linked=linked)

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

        def body() -> None:
            out = _Contiguous(output)
            self._all_to_all_flat(out.dense.view(-1), _alias(input).contiguous().view(-1),
                                  _element_splits(output, output_split_sizes, self.size()),
                                  _element_splits(input, input_split_sizes, self.size()), linked, opts)
            out.finish()
        return self._run("all_to_all_single", [output, input], [output], body, agree=[], linked=linked)

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
            self._all_to_all_flat(whole, torch.cat([_alias(t).reshape(-1) for t in inputs]), sizes,
                                  [t.numel() for t in inputs], linked, opts)
            for t, piece in zip(outputs, whole.split(sizes)):
                _alias(t).copy_(piece.view(t.shape))
        return self._run("all_to_all", [*outputs, *inputs], outputs, body, agree=[], linked=linked)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> dist.Work:
        opts = opts or dist.GatherOptions()
        flat = [t for group in outputs for t in group]
        if not self._on_neuron([*inputs, *flat]):
            return self._host().gather(outputs, inputs, opts)
        destinations = outputs if self.rank() == opts.rootRank else []  # as for scatter
        linked = self._link is not None and len(inputs) == 1

        def body() -> None:
            if linked:  # into one buffer on the root, then to the list
                source = _alias(inputs[0]).contiguous()
                whole = torch.empty((self.size(), source.numel()), dtype=source.dtype) if destinations else None
                self._link.gather(whole, source)
                for group in destinations:
                    for piece, t in zip(whole, group):
                        _alias(t).copy_(piece.view(t.shape))
                return
            out_views = [[_Contiguous(t) for t in group] for group in destinations]
            self._gloo.gather([[v.dense for v in group] for group in out_views],
                              [_alias(t).contiguous() for t in inputs], opts).wait()
            for group in out_views:
                for v in group:
                    v.finish()
        return self._run("gather", [*inputs, *flat], flat, body, agree=inputs, root=opts.rootRank, linked=linked)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> dist.Work:
        opts = opts or dist.ScatterOptions()
        flat = [t for group in inputs for t in group]
        if not self._on_neuron([*outputs, *flat]):
            return self._host().scatter(outputs, inputs, opts)
        # Only the root's list is read (Gloo refuses one on the other ranks; DTensor passes it on all).
        sources = inputs if self.rank() == opts.rootRank else []
        linked = self._link is not None and len(outputs) == 1

        def body() -> None:
            outs = [_Contiguous(t) for t in outputs]
            if linked:  # from one buffer on the root
                whole = torch.stack([_alias(t).reshape(-1) for t in sources[0]]) if sources else None
                self._link.scatter(outs[0].dense, whole, opts.rootRank)
            else:
                self._gloo.scatter([v.dense for v in outs],
                                   [[_alias(t).contiguous() for t in group] for group in sources], opts).wait()
            for v in outs:
                v.finish()
        return self._run("scatter", [*outputs, *flat], outputs, body, agree=outputs, root=opts.rootRank,
                         linked=linked)

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
        posted: list[tuple[dist.Work, list[_Contiguous]]] = []

        def post_kernel() -> None:
            views = [_Contiguous(t) for t in tensors]
            posted.append((post([v.dense for v in views]), views))

        self._run(f"{name} (peer {peer}) post", tensors, tensors, post_kernel)

        def complete() -> None:
            work, views = posted[0]
            work.wait()
            if copy_back:
                for v in views:
                    v.finish()
        return _DeferredWork(self, f"{name} (peer {peer})", tensors, complete)

    # -- coalescing (``_coalescing_manager``, ``batch_isend_irecv``): ops run as issued
    def _start_coalescing(self, device: torch.device) -> None:
        """Operations inside a coalescing block are queued one by one, in order."""

    def _end_coalescing(self, device: torch.device) -> dist.Work:
        return self.barrier() if device.type != "neuron" else _DoneWork()


@never_traced
class _DoneWork(dist.Work):
    """The work of a coalescing block whose operations each returned their own work."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


@never_traced
class _DeferredWork(dist.Work):
    """A point-to-point operation: its completion is queued on the communication stream when the
    caller waits (or when it is garbage: the receive still lands before later collectives)."""

    def __init__(self, group: NeuronProcessGroup, name: str, tensors: list[torch.Tensor],
                 complete: Callable[[], None]) -> None:
        super().__init__()
        self._work: dist.Work | None = None
        self._group, self._name, self._tensors, self._complete = group, name, tensors, complete

    def _queued(self) -> dist.Work:
        if self._work is None:
            self._work = self._group._run(self._name, self._tensors, self._tensors, self._complete)
        return self._work

    def wait(self, timeout: timedelta | None = None) -> bool:
        return self._queued().wait(timeout)

    def is_completed(self) -> bool:
        return self._work is not None and self._work.is_completed()

    def get_future(self) -> torch.futures.Future:
        return self._queued().get_future()

    def synchronize(self) -> None:
        self._queued().synchronize()


_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all_single", "all_to_all", "gather", "scatter")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.int16,
           torch.int8, torch.uint8, torch.bool)


def _signature(name: str, tensors: Sequence[torch.Tensor], root: int) -> list[int]:
    """What every rank must agree on: the collective, the root, the dtype and element count of
    each tensor whose size is fixed across ranks (all-to-all: the dtype only)."""
    dtypes = {t.dtype for t in tensors} or {torch.float32}
    sizes = [] if name.startswith("all_to_all") else [t.numel() for t in tensors]
    codes = [_DTYPES.index(d) if d in _DTYPES else 99 for d in sorted(dtypes, key=str)]
    return [_COLLECTIVES.index(name), root, len(codes), *codes, len(sizes), *sizes]


def _describe(signature: list[int]) -> str:
    name, root, *rest = signature
    return f"{_COLLECTIVES[name] if 0 <= name < len(_COLLECTIVES) else name} root {root} dtype/sizes {rest}"


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


def _allreduce_opts(op: Any, timeout: timedelta) -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp, opts.timeout = op, timeout
    return opts


def _reduce_scatter_opts(op: Any, timeout: timedelta) -> dist.ReduceScatterOptions:
    opts = dist.ReduceScatterOptions()
    opts.reduceOp, opts.timeout = op, timeout
    return opts


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
