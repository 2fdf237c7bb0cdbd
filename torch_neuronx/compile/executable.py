"""A compiled graph as one kernel on a core's hardware queue.

One kernel runs the host-compiled code on host aliases of the inputs — in-place updates of
inputs write device memory directly. The generated code allocates its buffers in a fixed order:
the first call runs it with its own allocations and waits, learning which allocation (or input)
each result lives in. Every call then allocates those allocations' device buffers when the
executable is called, and later kernels hand them to the generated code, so results are computed
in place; outputs are the buffers, the inputs, or tensors on their memory — aliasing as the
generated code's results do on the CPU. A result in memory the code did not allocate through us
is copied. After the first call, a call is one C++ call (``_C._CompiledGraph``); on an idle core
the kernel runs on the calling thread (docs/architecture.md, "Kernels on an idle core").
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch._inductor.output_code import OutputCode
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import _C
from . import cache, cost, metrics, rng, settings

KERNEL_PREFIX = "neuron::compiled_graph"  # how the profiler recognizes compiled graphs (docs/profiling.md)


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return t.shape, t.stride(), t.dtype


def _output_specs(gm: fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [node.meta.get("val") if isinstance(node, fx.Node) else node for node in output.args[0]]


def _graph_device(gm: fx.GraphModule) -> int:
    """The index of the neuron device a graph computes on, from its tensors (-1: none): a graph
    may take no tensor at all (``create_block_mask(..., device="neuron")``) and create them."""
    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and value.device.type == "neuron":
            return value.device.index or 0
    return -1


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _storage(t: Any) -> int:
    """The address of a tensor's memory (0: none)."""
    return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else 0


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How a call produces its outputs, learned from the first call (see ``_C._CompiledGraph``)."""
    buffer_specs: list[torch.Tensor]  # meta tensors: the device buffers a call allocates
    outputs: list[_C._GraphOutput]  # per output: where a call takes it from
    buffer_of_allocation: dict[int, int]  # allocation position -> device buffer it computes in
    copies: list[tuple[int, int]]  # (result, device buffer it is copied into)


def _learn(outputs: list[Any], made: list[torch.Tensor], hosts: list[Any], results: list[Any]) -> _Plan:
    """The plan, from a call's allocations, inputs and results. Results are matched to memory by
    address: the recording call keeps every allocation alive, so no two share one."""
    allocation_at = {_storage(b): k for k, b in enumerate(made)}
    input_at = {_storage(h): j for j, h in enumerate(hosts) if _storage(h)}
    input_index = {id(h): j for j, h in enumerate(hosts)}
    specs: list[torch.Tensor] = []
    buffer_of_allocation: dict[int, int] = {}
    entries: list[_C._GraphOutput] = []
    copies: list[tuple[int, int]] = []
    source = _C._GraphOutput.Source
    for i, (result, spec) in enumerate(zip(results, outputs)):
        if not isinstance(spec, torch.Tensor):
            entries.append(_C._GraphOutput(source=source.value, value=spec))
            continue
        address = _storage(result) if _layout(result) == _layout(spec) else 0
        view = _C._OutputView(sizes=list(result.shape), strides=list(result.stride()),
                              offset=result.storage_offset(), dtype=result.dtype) if address else None
        if id(result) in input_index:
            entries.append(_C._GraphOutput(source=source.input, index=input_index[id(result)]))
        elif address in input_at:
            entries.append(_C._GraphOutput(source=source.input, index=input_at[address], view=view))
        elif address in allocation_at:
            k = allocation_at[address]
            if k not in buffer_of_allocation:
                buffer_of_allocation[k] = len(specs)
                specs.append(_meta(made[k]))
            entries.append(_C._GraphOutput(source=source.buffer, index=buffer_of_allocation[k],
                                           view=None if result is made[k] else view))
        else:  # memory the generated code did not allocate through us (or another layout): copied
            copies.append((i, len(specs)))
            entries.append(_C._GraphOutput(source=source.buffer, index=len(specs)))
            specs.append(_meta(spec))
    return _Plan(specs, entries, buffer_of_allocation, copies)


class Executable(OutputCode):
    """Callable with the boxed calling convention of AOTAutograd compilers. An ``OutputCode``, so
    that AOTAutograd's cache can keep it with the graph's forward/backward partition: it pickles
    as its executable-cache entry and output layouts, and loads the generated code again in
    ``post_compile``."""

    # Identity, not the field equality OutputCode's dataclass generates (the fields it compares
    # are the same for every executable), which would also leave executables unhashable.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(self, compiled: Callable[[list[Any]], Any], gm: fx.GraphModule, seeds: int,
                 region: str, kind: str, digest: str | None) -> None:
        """``compiled``: the entry function of the generated module
        (``generated_module.device_source``), taking the boxed host inputs (then ``seeds`` random
        seeds, when the graph has random ops); ``gm``: the graph it
        was compiled from, whose output metadata gives the outputs' layouts; ``region`` and
        ``kind`` name the kernel on the queue and in profiles (``<region>_<kind>``, e.g.
        ``neuron::compiled_graph_3_forward``); ``digest``: its executable-cache entry (None: not
        cached)."""
        self._boxed_call = True  # an instance attribute: AOTAutograd's wrappers copy __dict__
        with unset_fake_temporarily():  # plain meta tensors, which pickle
            self.outputs = [_meta(v) if isinstance(v, torch.Tensor) else v for v in _output_specs(gm)]
        self.seeds = seeds
        self.device = _graph_device(gm)
        self.kind = kind
        self.digest = digest
        self.cost = cost.count(gm)
        self._bind(compiled, region)

    def _bind(self, compiled: Callable[[list[Any]], Any], region: str) -> None:
        self.compiled = compiled
        self.graph: _C._CompiledGraph | None = None  # after the first call
        self._first_call_lock = threading.Lock()  # two threads calling at once make one graph
        self.name = f"{region}_{self.kind}"
        cost.record(self.name, self.cost)  # its FLOPs and bytes, for the profiler's estimates

    def __getstate__(self) -> dict[str, Any]:
        if self.digest is None:
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
            raise BypassAOTAutogradCache("a neuron executable with constants is not cached")
        return {k: v for k, v in self.__dict__.items() if k not in ("compiled", "graph", "name", "_first_call_lock")}

    def prepare_for_serialization(self) -> None:
        """Nothing to drop: ``__getstate__`` keeps only what a later process needs."""

    def post_compile(self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: dict[str, Any]) -> None:
        """Loaded from AOTAutograd's cache: the generated code from the executable cache, named
        for this process's graph (``compile_region_name``). A missing entry raises, and
        AOTAutograd compiles the graph again."""
        root = settings.cache_dir()
        with metrics.stage("cache_load"):
            entry = cache.load(root, self.digest) if root else None
        if entry is None:
            raise RuntimeError(f"neuron executable {self.digest} is not in the executable cache")
        metrics.count("cache_hits")
        self._bind(entry[0], graph_kwargs["compile_region_name"])

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        """No Triton kernels: the generated code is C++."""

    def __call__(self, args: list[Any]) -> list[Any]:
        if self.seeds:
            device = _C._compiled_graph_device(args, self.device)
            args.append(rng.draw_seeds(self.seeds, torch.device("neuron", device)))
        if self.graph is None:
            with self._first_call_lock:
                if self.graph is None:
                    inputs = list(args)
                    args.clear()  # boxed convention: the caller's list no longer keeps inputs alive
                    return self._first_call(_C._compiled_graph_device(inputs, self.device), inputs)
        return self.graph.call_boxed(args, self.device)  # the common call, all in C++

    def _first_call(self, device: int, inputs: list[Any]) -> list[Any]:
        """Run once with the generated code's own allocations and wait, learn where each result
        lives, then give the outputs that layout (aliasing as the results do) and copy the
        allocations' contents into them."""
        ran: dict[str, Any] = {}

        def kernel() -> None:
            ran["hosts"] = _C._host_aliases(inputs)
            ran["results"], ran["made"] = _C._record_compiled_graph(self.compiled, list(ran["hosts"]))

        _C._launch_python_kernel(device, kernel, self.name, wait=True)
        plan = _learn(self.outputs, ran["made"], ran["hosts"], ran["results"])
        self.graph = _C._CompiledGraph(self.compiled, self.name, plan.buffer_specs, plan.outputs,
                                       plan.buffer_of_allocation, plan.copies)
        outputs, buffers = self.graph.make(inputs, device)

        def fill() -> None:
            buffer_hosts = _C._host_aliases(buffers)
            for k, b in plan.buffer_of_allocation.items():
                buffer_hosts[b].untyped_storage().copy_(ran["made"][k].untyped_storage())
            for i, b in plan.copies:
                buffer_hosts[b].copy_(ran["results"][i])

        _C._launch_python_kernel(device, fill, self.name, wait=False)
        return outputs
