"""A compiled graph as one kernel on a core's hardware queue.

Outputs are allocated from the graph's (static) output metadata when the executable is called,
and one kernel runs the host-compiled code on host aliases of the inputs — in-place updates of
inputs write device memory directly. The generated code allocates its buffers in a fixed order;
the first call records which allocation becomes which output, and later calls hand those
allocations the outputs' device memory, so results are computed in place. Any other result is
copied into its output.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from .. import _C
from . import cost, rng

KERNEL_PREFIX = "neuron::compiled_graph"  # how the profiler recognizes compiled graphs (docs/profiling.md)
_running = threading.local()  # per core worker thread: the allocation state of the running kernel


class _Allocations:
    """The running kernel's buffer allocations: ``plan`` maps an allocation's position to the
    output memory it gets; the others are recorded."""

    def __init__(self, plan: dict[int, torch.Tensor]) -> None:
        self.plan = plan
        self.made: list[torch.Tensor] = []


def _allocate(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The generated code's CPU allocator (``empty_strided_cpu``), as seen from a neuron kernel;
    outside one, the plain CPU allocation."""
    state: _Allocations | None = getattr(_running, "allocations", None)
    if state is None:
        return torch._C._dynamo.guards._empty_strided_cpu(size, stride, dtype)
    buffer = state.plan.get(len(state.made))
    if buffer is None:
        buffer = torch._C._dynamo.guards._empty_strided_cpu(size, stride, dtype)
    state.made.append(buffer)
    return buffer


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return t.shape, t.stride(), t.dtype


def _same_memory_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same elements at the same offsets: strides of size-1 dimensions do not matter."""
    return (a.shape == b.shape and a.dtype == b.dtype
            and all(x == y for n, x, y in zip(a.shape, a.stride(), b.stride()) if n > 1))


def _in_place(out: torch.Tensor, result: torch.Tensor) -> bool:
    return result.data_ptr() == out.data_ptr() and _layout(result) == _layout(out)


def _output_specs(gm: fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [node.meta.get("val") if isinstance(node, fx.Node) else node for node in output.args[0]]


def _fill(outputs: list[Any], results: list[Any], pending: list[int]) -> None:
    """Copy the results at ``pending`` positions into their outputs. A result viewing the memory
    of an output computed in place is cloned first, so no copy overwrites what is still to be read."""
    if not pending:
        return
    in_place = {out.data_ptr() for i, out in enumerate(outputs)
                if isinstance(out, torch.Tensor) and i not in pending}
    for i in pending:
        out, result = outputs[i], results[i]
        out.copy_(result.clone() if result.untyped_storage().data_ptr() in in_place else result)


@dataclasses.dataclass(frozen=True)
class _OutputPlan:
    """How a call produces its outputs. Replaced as a whole, so a call launched before the first
    call's kernel ran keeps the plan it allocated its outputs by."""
    output_of_allocation: dict[int, int]  # allocation position -> output computed in it
    input_of_output: dict[int, int]  # output -> the input it is
    pending: list[int] | None  # outputs copied; None: not learned yet, check each one
    allocated: list[int]  # outputs allocated per call
    allocated_specs: list[torch.Tensor]  # their layouts, as meta tensors

    @staticmethod
    def make(outputs: list[Any], output_of_allocation: dict[int, int], input_of_output: dict[int, int],
             learned: bool) -> _OutputPlan:
        tensors = [i for i, v in enumerate(outputs) if isinstance(v, torch.Tensor)]
        in_place = {*output_of_allocation.values(), *input_of_output}
        allocated = [i for i in tensors if i not in input_of_output]
        specs = [torch.empty_strided(outputs[i].shape, outputs[i].stride(), dtype=outputs[i].dtype,
                                     device="meta") for i in allocated]
        pending = [i for i in tensors if i not in in_place] if learned else None
        return _OutputPlan(output_of_allocation, input_of_output, pending, allocated, specs)


class Executable:
    """Callable with the boxed calling convention of AOTAutograd compilers."""

    def __init__(self, compiled: Callable[[list[Any]], Any], gm: fx.GraphModule, seeds: int,
                 name: str) -> None:
        """``compiled``: the entry function of Inductor's generated module, taking the boxed host
        inputs (then ``seeds`` random seeds, when the graph has random ops); ``gm``: the graph it
        was compiled from, whose output metadata gives the outputs' layouts; ``name``: the
        kernel's name on the queue and in profiles (``neuron::compiled_graph_<id>_<kind>``)."""
        self._boxed_call = True  # an instance attribute: AOTAutograd's wrappers copy __dict__
        self.compiled = compiled
        getattr(compiled, "__func__", compiled).__globals__["empty_strided_cpu"] = _allocate
        self.outputs = _output_specs(gm)
        self.seeds = seeds
        self.plan = _OutputPlan.make(self.outputs, {}, {}, learned=False)
        self.name = name
        cost.record(name, gm)  # its FLOPs and bytes, for the profiler's estimates

    def _learn(self, made: list[torch.Tensor], hosts: list[Any], results: list[Any]) -> None:
        """Record which allocation (or input) each output is, from a call that copied them all."""
        # Results are matched by address: the generated code may return a reinterpretation of a
        # buffer. Freed buffers' memory is reused, and the last allocation at an address is live.
        position = {buffer.data_ptr(): k for k, buffer in enumerate(made)}
        input_index = {id(host): j for j, host in enumerate(hosts)}
        output_of_allocation: dict[int, int] = {}
        input_of_output: dict[int, int] = {}
        for i, (result, spec) in enumerate(zip(results, self.outputs)):
            if not (isinstance(spec, torch.Tensor) and isinstance(result, torch.Tensor)
                    and _layout(result) == _layout(spec)):
                continue
            k = position.get(result.data_ptr())
            if id(result) in input_index:
                input_of_output[i] = input_index[id(result)]
            elif k is not None and k not in output_of_allocation and _same_memory_layout(made[k], spec):
                output_of_allocation[k] = i
        self.plan = _OutputPlan.make(self.outputs, output_of_allocation, input_of_output, learned=True)

    def __call__(self, args: list[Any]) -> list[Any]:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        plan = self.plan
        inputs = list(args)
        if self.seeds:
            inputs.append(rng.draw_seeds(self.seeds, device))
        outputs = list(self.outputs)
        for i, j in plan.input_of_output.items():
            outputs[i] = inputs[j]
        for i, out in zip(plan.allocated, _C._empty_outputs(plan.allocated_specs, device.index)):
            outputs[i] = out
        args.clear()  # boxed convention: the caller's list no longer keeps inputs alive
        self._launch(device.index, plan, inputs, outputs)
        return outputs

    def _launch(self, device: int, plan: _OutputPlan, inputs: list[Any], outputs: list[Any]) -> None:
        def kernel() -> None:
            aliases = _C._host_aliases(inputs + outputs)
            hosts, out_aliases = aliases[:len(inputs)], aliases[len(inputs):]
            _running.allocations = allocations = _Allocations(
                {k: out_aliases[i] for k, i in plan.output_of_allocation.items()})
            try:
                results = self.compiled(list(hosts))  # the boxed call empties its list
            finally:
                _running.allocations = None
            pending = plan.pending
            if pending is None:
                self._learn(allocations.made, hosts, results)
                pending = [i for i, (out, result) in enumerate(zip(out_aliases, results))
                           if isinstance(out, torch.Tensor) and not _in_place(out, result)]
            _fill(out_aliases, results, pending)

        _C._launch_python_kernel(device, kernel, self.name, False)
