"""A compiled graph as one kernel on a core's hardware queue.

Outputs are allocated from the graph's (static) output metadata when the executable is called,
and one kernel runs the host-compiled code on host aliases of the inputs — in-place updates of
inputs write device memory directly. The generated code allocates its buffers in a fixed order;
the first call records which allocation becomes which output, and later calls hand those
allocations the outputs' device memory, so results are computed in place. Any other result is
copied into its output.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from .. import _C
from . import cost

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


def _fill(outputs: list[Any], results: list[Any]) -> None:
    """Copy each tensor result not computed in its own output. A result viewing the memory of
    an output computed in place is cloned first, so no copy overwrites what is still to be read."""
    tensors = [(out, result) for out, result in zip(outputs, results) if isinstance(out, torch.Tensor)]
    in_place = {out.data_ptr() for out, result in tensors if _in_place(out, result)}
    pending = [(out, result) for out, result in tensors if not _in_place(out, result)]
    for out, result in pending:
        out.copy_(result.clone() if result.untyped_storage().data_ptr() in in_place else result)


class Executable:
    """Callable with the boxed calling convention of AOTAutograd compilers."""

    def __init__(self, compiled: Callable[[list[Any]], Any], gm: fx.GraphModule, name: str) -> None:
        """``compiled``: the entry function of Inductor's generated module, taking the boxed host
        inputs; ``gm``: the graph it was compiled from, whose output metadata gives the outputs'
        layouts."""
        self._boxed_call = True  # an instance attribute: AOTAutograd's wrappers copy __dict__
        self.compiled = compiled
        getattr(compiled, "__func__", compiled).__globals__["empty_strided_cpu"] = _allocate
        self.outputs = _output_specs(gm)
        self.name = name
        cost.record(name, gm)  # its FLOPs and bytes, for the profiler's estimates
        # Learned on the first call: output index per allocation position, input per output.
        self.output_of_allocation: dict[int, int] | None = None
        self.input_of_output: dict[int, int] = {}

    def _learn(self, made: list[torch.Tensor], hosts: list[Any], results: list[Any]) -> None:
        # Results are matched by address: the generated code may return a reinterpretation of a
        # buffer. Freed buffers' memory is reused, and the last allocation at an address is live.
        position = {buffer.data_ptr(): k for k, buffer in enumerate(made)}
        input_index = {id(host): j for j, host in enumerate(hosts)}
        self.output_of_allocation, self.input_of_output = {}, {}
        for i, (result, spec) in enumerate(zip(results, self.outputs)):
            if not (isinstance(spec, torch.Tensor) and isinstance(result, torch.Tensor)
                    and _layout(result) == _layout(spec)):
                continue
            k = position.get(result.data_ptr())
            if id(result) in input_index:
                self.input_of_output[i] = input_index[id(result)]
            elif k is not None and k not in self.output_of_allocation and _same_memory_layout(made[k], spec):
                self.output_of_allocation[k] = i

    def __call__(self, args: list[Any]) -> list[Any]:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        inputs = list(args)
        outputs = [inputs[self.input_of_output[i]] if i in self.input_of_output
                   else torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device)
                   if isinstance(v, torch.Tensor) else v for i, v in enumerate(self.outputs)]
        args.clear()  # boxed convention: the caller's list no longer keeps inputs alive

        def kernel() -> None:
            hosts = [_C._host_alias(a) if isinstance(a, torch.Tensor) else a for a in inputs]
            aliases = [_C._host_alias(o) if isinstance(o, torch.Tensor) else o for o in outputs]
            plan = {k: aliases[i] for k, i in (self.output_of_allocation or {}).items()}
            _running.allocations = allocations = _Allocations(plan)
            try:
                results = self.compiled(list(hosts))  # the boxed call empties its list
            finally:
                _running.allocations = None
            if self.output_of_allocation is None:
                self._learn(allocations.made, hosts, results)
            _fill(aliases, results)

        _C._launch_python_kernel(device.index, kernel, self.name, False)
        return outputs
