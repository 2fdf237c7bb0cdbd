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


def _output_specs(gm: fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [node.meta.get("val") if isinstance(node, fx.Node) else node for node in output.args[0]]


def _fill(outputs: list[Any], results: list[Any]) -> None:
    """Copy each tensor result not computed in its own output. A result viewing the memory of
    an output computed in place is cloned first, so no copy overwrites what is still to be read."""
    tensors = [(out, result) for out, result in zip(outputs, results) if isinstance(out, torch.Tensor)]
    in_place = {out.data_ptr() for out, result in tensors if result is out}
    pending = [(out, result) for out, result in tensors if result is not out]
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
        self.output_of_allocation: dict[int, int] | None = None  # learned on the first call

    def _learn(self, made: list[torch.Tensor], results: list[Any]) -> None:
        position = {id(buffer): k for k, buffer in enumerate(made)}
        self.output_of_allocation = {position[id(r)]: i for i, (r, spec) in enumerate(zip(results, self.outputs))
                                     if id(r) in position and isinstance(spec, torch.Tensor)
                                     and (r.shape, r.stride(), r.dtype) == (spec.shape, spec.stride(), spec.dtype)}

    def __call__(self, args: list[Any]) -> list[Any]:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        outputs = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device)
                   if isinstance(v, torch.Tensor) else v for v in self.outputs]
        inputs = list(args)
        args.clear()  # boxed convention: the caller's list no longer keeps inputs alive

        def kernel() -> None:
            hosts = [_C._host_alias(a) if isinstance(a, torch.Tensor) else a for a in inputs]
            aliases = [_C._host_alias(o) if isinstance(o, torch.Tensor) else o for o in outputs]
            plan = {k: aliases[i] for k, i in (self.output_of_allocation or {}).items()}
            _running.allocations = allocations = _Allocations(plan)
            try:
                results = self.compiled(hosts)
            finally:
                _running.allocations = None
            if self.output_of_allocation is None:
                self._learn(allocations.made, results)
            _fill(aliases, results)

        _C._launch_python_kernel(device.index, kernel, self.name, False)
        return outputs
