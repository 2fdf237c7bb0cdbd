"""Validation kernels written in the kernel language (tested against numpy/torch references)."""
from .flash_attention import flash_attention_fwd
from .layernorm import layernorm_bwd, layernorm_fwd
from .matmul import matmul
from .rmsnorm import rmsnorm, rmsnorm_bwd, rmsnorm_fwd
from .softmax import softmax

__all__ = ["matmul", "softmax", "rmsnorm", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd", "layernorm_bwd",
           "flash_attention_fwd"]
