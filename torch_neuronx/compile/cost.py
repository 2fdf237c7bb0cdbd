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
  written, views of one result are written once;
- ops: the graph's operators as :class:`Op` records (what each reads and writes by storage, views
  free), which the profiler cuts into fused kernels as the whole-model estimator does
  (:mod:`torch_neuronx.profiling.graph_estimate`).
"""
from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

MATMUL, ATTENTION, ELEMENTWISE = "matmul", "attention", "elementwise"


@dataclass(frozen=True)
class Op:
    """One operator call as the cost model sees it: its work and the storages it reads and writes
    (recorded from a compiled graph here, or from a model on meta tensors by
    :mod:`torch_neuronx.profiling.op_trace`)."""

    name: str
    kind: str                       # MATMUL, ATTENTION or ELEMENTWISE
    tensor_flops: int               # TensorE FLOPs (matrix and attention operators)
    lane_elements: int              # elements the lane engines (VectorE/ScalarE) process
    dtype: str                      # dtype of its first tensor input, as torch names it
    reads: tuple[tuple[int, int], ...]   # (storage id, bytes) of each tensor read
    writes: tuple[tuple[int, int], ...]  # (storage id, bytes) of each tensor written
    phase: str                      # "forward" or "backward"


@dataclass(frozen=True)
class GraphCost:
    """FLOPs and bytes of one execution of a compiled graph."""

    matmul_flops: dict[str, int]  # by dtype name as torch spells it ("bfloat16", "float32")
    bytes_moved: int
    unestimated: tuple[str, ...] = ()  # why a node's FLOPs could not be counted
    ops: tuple[Op, ...] = field(default=(), compare=False)  # the operator trace, in graph order


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
    """The FLOPs, bytes and operator trace of one execution of ``gm`` (an AOT graph whose nodes
    carry ``val``)."""
    flops: dict[str, int] = {}
    failed: list[str] = []
    ops: list[Op] = []
    storage: dict[fx.Node, int] = {}  # node -> the storage it reads or writes (views: their base's)
    moved = 0

    def of(node: fx.Node) -> int:
        node = _base(node)
        while node.op == "call_function" and node.target is operator.getitem:  # one result of a multi-output op
            node = _base(node.args[0])
        return storage.setdefault(node, len(storage))

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            moved += _bytes(node.meta.get("val"))
        elif node.op == "output":
            written = {_base(n) for n in tree_leaves(node.args[0]) if isinstance(n, fx.Node)}
            moved += sum(_bytes(n.meta.get("val")) for n in written if n.op != "placeholder")
        elif node.op == "call_function" and not getattr(node.target, "is_view", False) \
                and node.target is not operator.getitem:
            op = _op(node, of, failed)
            if op is not None:
                ops.append(op)
                if op.kind == MATMUL:
                    flops[op.dtype] = flops.get(op.dtype, 0) + op.tensor_flops
    return GraphCost(flops, moved, tuple(failed), tuple(ops))


_SCALED_MATMULS = {"_scaled_mm", "_scaled_mm_v2", "_scaled_grouped_mm",  # aten's, and the device's
                   "scaled_mm", "scaled_mm_v2", "scaled_grouped_mm"}


def is_scaled_matmul(name: str) -> bool:
    """``name`` (``"aten::_scaled_mm"``, ``"torch_neuronx::scaled_mm.default"``...) is a scaled matmul."""
    return name.rpartition("::")[2].split(".")[0] in _SCALED_MATMULS


def scaled_matmul_cost(name: str, inputs: list[tuple[Sequence[int], str]], output: Sequence[int]
                       ) -> tuple[int, str] | None:
    """(TensorE FLOPs, the dtype whose TensorE rate applies) of a scaled matmul, None for another
    operator. ``inputs``: (shape, dtype name: torch's or c10's) of its tensor arguments in order; ``output``:
    its result's shape. PyTorch's FLOP counter has a formula for ``_scaled_mm`` only, which counts
    an fp4 operand's packed K once: here K is the values', the rate is the MX one (``"mx"``) when
    E8M0 block scales come with the operands, and a grouped matmul counts its groups' products."""
    if not is_scaled_matmul(name) or len(inputs) < 2:
        return None
    (a, a_dtype), (b, _) = inputs[0], inputs[1]
    k = a[-1] * (2 if a_dtype.lower() == "float4_e2m1fn_x2" else 1)
    # A grouped 2D x 2D product groups K: its [G, M, N] result's groups share a's K between them.
    products = math.prod(output[1:]) if len(a) == len(b) == 2 and len(output) == 3 else math.prod(output)
    block_scaled = any(dtype.lower() == "float8_e8m0fnu" for _, dtype in inputs[2:])
    return 2 * products * k, "mx" if block_scaled else a_dtype


def _op(node: fx.Node, of: Any, failed: list[str]) -> Op | None:
    """One node as the cost model's operator: its FLOPs (a matrix operator) or the elements it
    writes, and what it reads and writes; None for a node without tensors."""
    outputs = [v for v in tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    inputs = [n for n in node.all_input_nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    if not outputs:
        return None
    reads = tuple((of(n), _bytes(n.meta["val"])) for n in inputs)
    writes = ((of(node), sum(_bytes(v) for v in outputs)),)
    first = next((n.meta["val"] for n in inputs), outputs[0])
    dtype = str(first.dtype).removeprefix("torch.")
    name = node.target.name() if isinstance(node.target, torch._ops.OpOverload) else str(node.target)
    scaled = scaled_matmul_cost(name, [(n.meta["val"].shape, str(n.meta["val"].dtype).removeprefix("torch."))
                                       for n in inputs], outputs[0].shape) if is_scaled_matmul(name) else None
    if scaled is not None:
        return Op(str(node.target), MATMUL, scaled[0], 0, scaled[1], reads, writes, "forward")
    formula = flop_registry.get(getattr(node.target, "overloadpacket", node.target))
    if formula is not None:
        args, kwargs = _val(node.args), _val(node.kwargs)
        try:
            n = int(formula(*args, **kwargs, out_val=node.meta.get("val")))
        except Exception as e:  # a formula that cannot read this node's arguments
            failed.append(f"FLOP formula of {node.target} failed: {type(e).__name__}: {e}")
            return None
        return Op(str(node.target), MATMUL, n, 0, dtype, reads, writes, "forward")
    return Op(str(node.target), ELEMENTWISE, 0, sum(v.numel() for v in outputs), dtype, reads, writes, "forward")


def record(kernel: str, cost: GraphCost) -> None:
    """Keep a graph's cost under its executable's kernel name. A name compiled again with another
    cost (a graph recompiled per input shape keeps its name) is ambiguous: no estimate."""
    _costs[kernel] = cost if _costs.get(kernel, cost) == cost else None


def graph_cost(kernel: str) -> GraphCost | None:
    """The recorded cost of a compiled graph's kernel, None if unknown or ambiguous."""
    return _costs.get(kernel)
