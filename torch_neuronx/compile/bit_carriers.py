"""Values whose dtype the host compiler cannot store, carried through a graph as their bytes.

MX matmuls take E8M0 block scales (and MXFP4 packed FP4 pairs); a compiled MX recipe computes the
scales, then pads and swizzles them (``full``, ``slice_scatter``, ``permute``, ``clone``) before
the matmul reads them. Inductor's C++ code generator has no C++ type for ``float8_e8m0fnu`` or
``float4_e2m1fn_x2`` (PyTorch 2.13: its GPU path supports them by Triton), so such a graph would
not compile. The values are only moved between their creation and their reader, so the pass
below moves their bytes instead: a byte-sized view that creates them (``view.dtype`` of uint8
bits) or a fill becomes uint8, the movement ops in between carry uint8, and each reader that is
not a movement op (the matmul, a graph output) gets the dtype back from ``bytes_as``, an operator
the compiled code calls as is (a ``view.dtype`` there would become generated code of that dtype
again); it copies the bytes, which are few (one scale per 32 elements). A graph input of such a
dtype (a backward's saved scales) becomes bytes the same way. The bytes and so the results are
those of eager.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

aten = torch.ops.aten

CARRIED = (torch.float8_e8m0fnu, torch.float4_e2m1fn_x2)
_BYTE = torch.uint8
# Ops that move elements without reading their values (beyond the views).
_MOVEMENT = {aten.clone.default, aten.copy.default, aten.slice_scatter.default, aten.select_scatter.default,
             aten.cat.default, aten.stack.default, aten.index_select.default, aten.gather.default}
_FILLS = {aten.full.default, aten.empty.memory_format, aten.empty_strided.default}


# Exact strides (those of ``eager_input_vals``, see _call): Inductor would otherwise lay the input
# out as it likes and then copy the result to the output's layout, in the dtype it has no type for.
@torch.library.custom_op("torch_neuronx::bytes_as", mutates_args=(), tags=(torch.Tag.needs_exact_strides,))
def bytes_as(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A copy of the bytes of ``bits`` as a tensor of ``dtype``, a dtype of the same size."""
    return bits.view(dtype).clone()


@bytes_as.register_fake
def _(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_like(bits, dtype=dtype)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _carried_dtype(node: Any) -> torch.dtype | None:
    val = _val(node)
    return val.dtype if isinstance(val, torch.Tensor) and val.dtype in CARRIED else None


def _bits(value: Any, dtype: torch.dtype) -> int:
    """The byte that a fill with ``value`` stores (eager's conversion)."""
    with unset_fake_temporarily():
        return int(torch.full((), value, dtype=dtype).view(_BYTE))


def _byte_view(node: fx.Node) -> bool:
    """``view.dtype`` between two dtypes of one byte."""
    return (node.target is aten.view.dtype and isinstance(node.args[0], fx.Node)
            and node.args[1].itemsize == 1 and _val(node.args[0]).dtype.itemsize == 1)


def _as_bytes(node: fx.Node) -> None:
    node.meta["val"] = node.meta["val"].view(_BYTE)


def carry_as_bytes(gm: fx.GraphModule) -> None:
    """Rewrite ``gm`` (a host graph) so that values of a :data:`CARRIED` dtype move as uint8."""
    graph = gm.graph
    carried: dict[fx.Node, torch.dtype] = {}  # node -> the dtype its bytes stand for
    body = next(n for n in graph.nodes if n.op != "placeholder")
    for node in list(graph.nodes):
        if node.op == "placeholder" and (dtype := _carried_dtype(node)) is not None:
            with graph.inserting_before(body):
                as_bytes = _call(graph, node, _BYTE)
            node.replace_all_uses_with(as_bytes, delete_user_cb=lambda user: user is not as_bytes)
            carried[as_bytes] = dtype
        elif node.op == "call_function" and (dtype := _carried_dtype(node)) is not None:
            if _byte_view(node):
                node.args = (node.args[0], _BYTE)
            elif node.target in _FILLS and node.kwargs.get("dtype") == dtype:
                if node.target is aten.full.default:
                    node.args = (node.args[0], _bits(node.args[1], dtype))
                node.kwargs = {**node.kwargs, "dtype": _BYTE}
            elif (node.target in _MOVEMENT or getattr(node.target, "is_view", False)) and all(
                    a in carried for a in node.all_input_nodes if _carried_dtype(a) is not None):
                pass  # the inputs are bytes already
            else:
                _restore_inputs(graph, node, carried)
                continue
            carried[node] = dtype
            _as_bytes(node)
        elif not _byte_view(node):  # a byte view of carried bytes reads them as they are
            _restore_inputs(graph, node, carried)
    graph.lint()
    gm.recompile()


def _restore_inputs(graph: fx.Graph, reader: fx.Node, carried: dict[fx.Node, torch.dtype]) -> None:
    """Give ``reader`` its carried inputs in their own dtype."""
    for source in [a for a in reader.all_input_nodes if a in carried]:
        with graph.inserting_before(reader):
            typed = _call(graph, source, carried[source])
        reader.replace_input_with(source, typed)


def _call(graph: fx.Graph, source: fx.Node, dtype: torch.dtype) -> fx.Node:
    """A ``bytes_as(source, dtype)`` node at the graph's insertion point, with its metadata."""
    node = graph.call_function(torch.ops.torch_neuronx.bytes_as.default, (source, dtype))
    node.meta["val"] = bytes_as(source.meta["val"], dtype)
    node.meta["eager_input_vals"] = ((source.meta["val"], dtype), {})
    return node
