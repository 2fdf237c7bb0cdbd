"""Mixture-of-experts layers on ``neuron``: vLLM's unquantized fused-MoE method, in torch.

On an out-of-tree platform vLLM builds no MoE kernel of its own (its kernels are Triton, CUDA
and CPU C++; ``select_unquantized_moe_backend`` answers "OOT"), and expects the platform to
register its method under the in-tree name. Its router calls the ``_moe_C`` CUDA ops
``topk_softmax`` and ``topk_sigmoid``, which the CPU build does not have. Importing this module
registers the method and the two ops for neuron tensors (in each worker process:
vllm_neuron.worker imports it before the model is built).

Each expert runs once on the tokens routed to it: tokens are sorted by expert, every expert's
rows go through its gate/up and down projections as one matmul each, and the weighted results
are added back to their tokens."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

GATED = {MoEActivation.SILU: F.silu, MoEActivation.GELU: F.gelu,
         MoEActivation.GELU_TANH: lambda x: F.gelu(x, approximate="tanh")}


def routed_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                   topk_ids: torch.Tensor, activation: MoEActivation, apply_router_weight_on_input: bool = False,
                   expert_map: torch.Tensor | None = None) -> torch.Tensor:
    """sum over each token's k experts of weight * down(act(gate) * up) (w13: [E, 2I, H] gate rows
    then up rows, w2: [E, H, I])."""
    if activation not in GATED:
        raise NotImplementedError(f"vllm_neuron: the MoE activation {activation.value} is not supported on "
                                  f"neuron (supported: {', '.join(a.value for a in GATED)})")
    tokens, k = topk_ids.shape
    num_experts = w13.shape[0]
    if expert_map is not None:
        raise NotImplementedError("vllm_neuron: expert parallelism is not supported on neuron; serve MoE models "
                                  "without --enable-expert-parallel")
    experts = topk_ids.flatten().to(torch.int64)
    order = experts.argsort(stable=True)
    counts = torch.bincount(experts, minlength=num_experts).tolist()
    rows = order // k
    weights = topk_weights.flatten()[order].to(x.dtype)[:, None]
    inputs = x[rows] * weights if apply_router_weight_on_input else x[rows]
    out = torch.empty(len(order), w2.shape[1], dtype=x.dtype, device=x.device)
    act = GATED[activation]
    start = 0
    for e, n in enumerate(counts):
        if n:
            gate, up = (inputs[start:start + n] @ w13[e].t()).chunk(2, dim=-1)
            out[start:start + n] = (act(gate) * up) @ w2[e].t()
        start += n
    if not apply_router_weight_on_input:
        out = out * weights
    return torch.zeros(tokens, w2.shape[1], dtype=x.dtype, device=x.device).index_add_(0, rows, out)


def top_k_routing(scores: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                  token_expert_indices: torch.Tensor, renormalize: bool, bias: torch.Tensor | None,
                  scaling: float = 1.0) -> None:
    """Write each token's k best experts by `scores` (+ `bias` for the choice only, as the CUDA
    kernels do) and their weights into the output tensors."""
    chosen = torch.topk(scores if bias is None else scores + bias, topk_ids.shape[1], dim=-1).indices
    weights = scores.gather(-1, chosen)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    topk_weights.copy_(weights * scaling)
    topk_ids.copy_(chosen)
    tokens, k = topk_ids.shape
    token_expert_indices.copy_(torch.arange(k, device=scores.device)[None, :] * tokens
                               + torch.arange(tokens, device=scores.device)[:, None])


def topk_softmax(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, renormalize: bool, bias: torch.Tensor | None,
                 is_padding: torch.Tensor | None) -> None:
    top_k_routing(gating_output.float().softmax(-1), topk_weights, topk_ids, token_expert_indices, renormalize, bias)


def topk_sigmoid(topk_weights: torch.Tensor, topk_ids: torch.Tensor, token_expert_indices: torch.Tensor,
                 gating_output: torch.Tensor, renormalize: bool, bias: torch.Tensor | None,
                 routed_scaling_factor: float, is_padding: torch.Tensor | None) -> None:
    top_k_routing(gating_output.float().sigmoid(), topk_weights, topk_ids, token_expert_indices, renormalize, bias,
                  routed_scaling_factor)


# The schemas of vLLM's CUDA build (csrc/moe/torch_bindings.cpp), defined here when the installed
# build has no _moe_C ops; the neuron implementations are registered in either case.
ROUTING_OPS = {
    "topk_softmax": ("topk_softmax(Tensor! topk_weights, Tensor! topk_indices, Tensor! token_expert_indices, "
                     "Tensor gating_output, bool renormalize, Tensor? bias, Tensor? is_padding) -> ()", topk_softmax),
    "topk_sigmoid": ("topk_sigmoid(Tensor! topk_weights, Tensor! topk_indices, Tensor! token_expert_indices, "
                     "Tensor gating_output, bool renormalize, Tensor? bias, float routed_scaling_factor, "
                     "Tensor? is_padding) -> ()", topk_sigmoid),
}
_library = torch.library.Library("_moe_C", "FRAGMENT")
for _name, (_schema, _impl) in ROUTING_OPS.items():
    if not hasattr(torch.ops._moe_C, _name):
        _library.define(_schema)
    _library.impl(_name, _impl, "PrivateUse1")


@CustomOp.register_oot(name="UnquantizedFusedMoEMethod")
class NeuronUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    @property
    def is_monolithic(self) -> bool:
        return False  # experts are selected by vLLM's router, then applied here

    def forward_oot(self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                    shared_experts: Any, shared_experts_input: torch.Tensor | None) -> torch.Tensor:
        # Shared experts ran before the routed ones (vLLM's runner calls them in the no-overlap order).
        return routed_experts(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids, layer.activation,
                              layer.apply_router_weight_on_input, layer.expert_map)
