"""The neuron lowering boundary: an ATen graph for a core becomes a graph for its host compiler.

The simulated core executes code compiled for the host (Inductor's C++ backend over
host-addressable memory), so the graph's device placements move to the CPU and its node
metadata is re-derived for CPU tensors. Shapes must be static.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx


class StaticShapeError(RuntimeError):
    """The graph has symbolic shapes, which compiled neuron executables do not support."""


def check_static(example_inputs: list[Any]) -> None:
    """Refuse symbolic sizes (``dynamic=True`` or automatic dynamic shapes)."""
    for value in example_inputs:
        sizes = [value] if isinstance(value, torch.SymInt) else (
            [*value.shape, *value.stride()] if isinstance(value, torch.Tensor) else [])
        if any(isinstance(s, torch.SymInt) for s in sizes):
            raise StaticShapeError(
                "torch.compile(backend='neuron'): the graph has dynamic shapes, but neuron executables "
                "are compiled for static shapes. Call torch.compile(..., dynamic=False); a new input "
                "shape then compiles a new executable.")


def _to_host_device(graph: fx.Graph) -> None:
    for node in graph.nodes:
        device = node.kwargs.get("device") if node.op == "call_function" else None
        if isinstance(device, torch.device) and device.type == "neuron":
            node.kwargs = {**node.kwargs, "device": torch.device("cpu")}


def lower_for_host(gm: fx.GraphModule, example_inputs: list[Any]) -> tuple[fx.GraphModule, list[Any]]:
    """The graph and example inputs retargeted to the host: CPU fake tensors of the same layout."""
    check_static(example_inputs)
    _to_host_device(gm.graph)
    gm.recompile()
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    with fake_mode:
        host_inputs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
                       if isinstance(x, torch.Tensor) else x for x in example_inputs]
        host_gm = make_fx(gm, tracing_mode="real")(*host_inputs)
    return host_gm, host_inputs
