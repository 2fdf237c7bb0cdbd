"""Validation kernels written in the kernel language (tested against numpy/torch references)."""
from .adamw import adamw_step
from .attention_backward import flash_bwd
from .attention_decode import decode_attention
from .cross_entropy import linear_cross_entropy_bwd, linear_cross_entropy_fwd
from .cumsum import cumsum
from .flash_attention import flash_attention_fwd, flash_fwd
from .layernorm import layernorm_bwd, layernorm_fwd
from .matmul import matmul
from .moe import blockwise_expert_matmul, router_topk
from .rmsnorm import rmsnorm, rmsnorm_bwd, rmsnorm_fwd
from .rope import rope
from .softmax import softmax
from .swiglu import swiglu_bwd, swiglu_fwd
from .topk import topk

__all__ = ["matmul", "softmax", "rmsnorm", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd", "layernorm_bwd",
           "rope", "cumsum", "topk", "router_topk", "blockwise_expert_matmul",
           "swiglu_fwd", "swiglu_bwd", "linear_cross_entropy_fwd", "linear_cross_entropy_bwd",
           "adamw_step",
           "flash_attention_fwd", "flash_fwd", "flash_bwd", "decode_attention"]
