"""A compiled graph as one kernel on a core's hardware queue.

Outputs are allocated from the graph's (static) output metadata when the executable is called,
and one kernel runs the host-compiled code on host aliases of the inputs — in-place updates of
inputs write device memory directly — then copies its results into the outputs.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from .. import _C


def _output_specs(gm: fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [node.meta.get("val") if isinstance(node, fx.Node) else node for node in output.args[0]]


class Executable:
    """Callable with the boxed calling convention of AOTAutograd compilers."""

    def __init__(self, compiled: Callable[[list[Any]], Any], gm: fx.GraphModule, name: str) -> None:
        """``compiled``: the host-compiled entry taking the boxed host inputs; ``gm``: the graph it
        was compiled from, whose output metadata gives the outputs' layouts."""
        self._boxed_call = True  # an instance attribute: AOTAutograd's wrappers copy __dict__
        self.compiled = compiled
        self.outputs = _output_specs(gm)
        self.name = name

    def __call__(self, args: list[Any]) -> list[Any]:
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        outputs = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device)
                   if isinstance(v, torch.Tensor) else v for v in self.outputs]
        inputs = list(args)
        args.clear()  # boxed convention: the caller's list no longer keeps inputs alive

        def kernel() -> None:
            hosts = [_C._host_alias(a) if isinstance(a, torch.Tensor) else a for a in inputs]
            results = self.compiled(hosts)
            for out, result in zip(outputs, results):
                if isinstance(out, torch.Tensor):
                    _C._host_alias(out).copy_(result)

        _C._launch_python_kernel(device.index, kernel, self.name, False)
        return outputs
