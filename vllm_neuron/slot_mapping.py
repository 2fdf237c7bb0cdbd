"""Where each scheduled token's key and value go in the paged KV cache, computed on the device.

vLLM computes the slot mapping with a Triton kernel (``ComputeSlotMappingKernel``); a platform
without Triton registers this function in its place (``register_triton_kernel_overrides``). It is
called with the kernel's launch arguments, in the kernel's parameter order."""
from __future__ import annotations

import torch

KERNEL = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"


def compute_slot_mapping(num_tokens: int, max_num_tokens: int, query_start_loc: torch.Tensor,
                         positions: torch.Tensor, block_table: torch.Tensor, block_table_stride: int,
                         slot_mapping: torch.Tensor, KV_CACHE_BLOCK_SIZE: int, TOTAL_CP_WORLD_SIZE: int = 1,
                         TOTAL_CP_RANK: int = 0, CP_KV_CACHE_INTERLEAVE_SIZE: int = 1, PAD_ID: int = -1,
                         BLOCK_SIZE: int = 1024) -> None:
    """slot_mapping[t] = block_table[request of t, position // block] * block + position % block,
    and PAD_ID for the padding tokens up to max_num_tokens."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("vllm_neuron: context parallelism is not supported on neuron "
                                  "(decode/prefill context parallel size must be 1)")
    n = int(num_tokens)
    if n > 0:
        token = torch.arange(n, device=slot_mapping.device)
        request = torch.searchsorted(query_start_loc[1:].to(torch.int64), token, right=True)
        position = positions[:n].to(torch.int64)
        table = block_table.reshape(-1, block_table_stride)
        block = table[request, position // KV_CACHE_BLOCK_SIZE].to(torch.int64)
        slot_mapping[:n] = block * KV_CACHE_BLOCK_SIZE + position % KV_CACHE_BLOCK_SIZE
    if max_num_tokens > n:
        slot_mapping[n:max_num_tokens] = PAD_ID
