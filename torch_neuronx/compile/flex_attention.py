"""FlexAttention in neuron-compiled graphs.

The FlexAttention higher-order ops are lowered to their dense math form (the implementation
PyTorch runs in eager mode: masked scores, softmax, and its backward), which the host compiler
fuses. Inductor's own FlexAttention kernels cover the CPU forward only, not its backward. Block
sparsity is therefore not exploited; results are exact. PyTorch's entry point refuses neuron
inputs before any backend sees them: ``workarounds.accept_neuron_flex_attention`` lets them
through.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx


# Defined here rather than referenced from torch._higher_order_ops.flex_attention: generated
# graph code names functions by module path, and that module is shadowed by the op of its name.
def dense_forward(*args: Any) -> Any:
    from torch._higher_order_ops.flex_attention import sdpa_dense
    return sdpa_dense(*args)


def dense_backward(*args: Any) -> Any:
    from torch._higher_order_ops.flex_attention import sdpa_dense_backward
    return sdpa_dense_backward(*args)


def _batchable(graph: fx.Graph) -> None:
    """prims.convert_element_type has no vmap batching rule: the dense form would trace a
    score_mod once per score element. aten._to_copy is the same conversion with one."""
    for node in graph.nodes:
        if node.target is torch.ops.prims.convert_element_type.default:
            node.target = torch.ops.aten._to_copy.default
            node.kwargs = {"dtype": node.args[1]}
            node.args = node.args[:1]


def decompose_to_dense(gm: fx.GraphModule) -> None:
    """Replace FlexAttention forward/backward nodes by their dense implementations, which a
    re-trace then records as ATen ops."""
    dense = {torch.ops.higher_order.flex_attention: dense_forward,
             torch.ops.higher_order.flex_attention_backward: dense_backward}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in dense:
            node.target = dense[node.target]
            for module in gm.modules():  # the score_mod/mask_mod subgraphs
                if isinstance(module, fx.GraphModule) and module is not gm:
                    _batchable(module.graph)
                    module.recompile()
