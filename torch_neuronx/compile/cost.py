"""The work of each compiled graph, counted once at compile time for the profiler's cost model.

A compiled graph runs as one kernel (``neuron::compiled_graph_<id>_<kind>``) whose tensors the
profiler cannot see, so its FLOPs and bytes are counted here from the AOT graph when the
executable is made (an executable loaded with its graph from AOTAutograd's cache carries its
count) and kept under the kernel's name:
- FLOPs: PyTorch's ``torch.utils.flop_counter`` formulas over the graph's nodes (matrix
  operators: mm, addmm, bmm, convolution, attention...), by the dtype of their first tensor
  argument, which sets the TensorE rate; a formula that cannot count its node is recorded with
  the reason (``GraphCost.unestimated``) so the graph is reported unestimated, not undercounted;
- bytes: the graph's tensor inputs read plus its tensor outputs written, as a fused kernel
  moves them (intermediates stay on chip); an output that is an input or a view of one is not
  written, views of one result are written once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry


@dataclass(frozen=True)
class GraphCost:
    """FLOPs and bytes of one execution of a compiled graph."""

    matmul_flops: dict[str, int]  # by dtype name as torch spells it ("bfloat16", "float32")
    bytes_moved: int
    unestimated: tuple[str, ...] = ()  # why a node's FLOPs could not be counted


_costs: dict[str, GraphCost | None] = {}  # kernel name -> its graph's cost; None when ambiguous


def _val(arg: Any) -> Any:
    return fx.node.map_arg(arg, lambda n: n.meta.get("val"))


def _bytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def _base(node: fx.Node) -> fx.Node:
    """The node whose memory a chain of views reads."""
    while node.op == "call_function" and getattr(node.target, "is_view", False):
        node = node.args[0]
    return node


def count(gm: fx.GraphModule) -> GraphCost:
    """The FLOPs and bytes of one execution of ``gm`` (an AOT graph whose nodes carry ``val``)."""
    flops: dict[str, int] = {}
    failed: list[str] = []
    moved = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            moved += _bytes(node.meta.get("val"))
        elif node.op == "output":
            written = {_base(n) for n in tree_leaves(node.args[0]) if isinstance(n, fx.Node)}
            moved += sum(_bytes(n.meta.get("val")) for n in written if n.op != "placeholder")
        elif node.op == "call_function":
            formula = flop_registry.get(getattr(node.target, "overloadpacket", node.target))
            if formula is None:
                continue
            args, kwargs = _val(node.args), _val(node.kwargs)
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            try:
                n = int(formula(*args, **kwargs, out_val=node.meta.get("val")))
            except Exception as e:  # a formula that cannot read this node's arguments
                failed.append(f"FLOP formula of {node.target} failed: {type(e).__name__}: {e}")
                continue
            dtype = str(first.dtype).removeprefix("torch.") if first is not None else "float32"
            flops[dtype] = flops.get(dtype, 0) + n
    return GraphCost(flops, moved, tuple(failed))


def record(kernel: str, cost: GraphCost) -> None:
    """Keep a graph's cost under its executable's kernel name. A name compiled again with another
    cost (a graph recompiled per input shape keeps its name) is ambiguous: no estimate."""
    _costs[kernel] = cost if _costs.get(kernel, cost) == cost else None


def graph_cost(kernel: str) -> GraphCost | None:
    """The recorded cost of a compiled graph's kernel, None if unknown or ambiguous."""
    return _costs.get(kernel)
