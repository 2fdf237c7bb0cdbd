"""Paged attention on ``neuron`` by vLLM's C++ paged-attention kernel (vllm_neuron/cpu_kernels.py).

The backend of vLLM's CPU build (``CPU_ATTN``) on neuron tensors: the KV cache of a layer is
``[num_blocks, kv_heads, block_size, 2 * head_size]`` (``LBHNC``), new keys and values go to their
slots with one kernel, and one kernel computes every request's attention (decodes and prefill
chunks together) reading the cache through the block table, with causal and sliding-window
masking. Both kernels run on the core; the kernel's work split (its "scheduler metadata")
is computed on the host from the host copies of the sequence lengths, as the CPU build does, and
copied to the device once per step."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from vllm.v1.attention.backend import AttentionType, CommonAttentionMetadata
from vllm.v1.attention.backends.cpu_attn import (
    CPUAttentionBackend,
    CPUAttentionBackendImpl,
    CPUAttentionMetadata,
    CPUAttentionMetadataBuilder,
)

from vllm_neuron.attention import refuse_unsupported


class NeuronKernelAttentionBackend(CPUAttentionBackend):
    supported_kv_cache_dtypes = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[NeuronKernelAttentionImpl]:
        return NeuronKernelAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[NeuronKernelAttentionMetadataBuilder]:
        return NeuronKernelAttentionMetadataBuilder

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER  # the CPU backend's encoder attention keeps its cache on the host


def relocated(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A device copy of the attention scheduler's metadata. The metadata holds pointers into
    itself (its work-item tables), so every 8-byte word that points into the host tensor is
    rebased onto the copy's address, which is where the kernel's host view of it lies."""
    out = torch.empty_like(host, device=device)
    words = host.view(torch.int64).clone()
    begin = host.data_ptr()
    inside = (words >= begin) & (words < begin + host.nbytes)
    words[inside] += out.data_ptr() - begin
    return out.copy_(words.view(host.dtype))


class NeuronKernelAttentionMetadataBuilder(CPUAttentionMetadataBuilder):
    """The CPU backend's metadata, scheduled on the host from the host copies of the sequence
    lengths (as the CPU build does) and copied to the device once per step."""

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> CPUAttentionMetadata:
        m = common_attn_metadata
        # Scheduling resizes the scratch memory of the attention kernels (one buffer per process,
        # vLLM's ScratchPadManager): the kernels of the step before must be done with it.
        torch.neuron.current_stream(self.device).synchronize()
        seq_lens = m.seq_lens_cpu_upper_bound  # exact without speculative decoding, which is not enabled here
        host = dataclasses.replace(m, query_start_loc=m.query_start_loc_cpu,
                                   seq_lens=m.seq_lens.cpu() if seq_lens is None else seq_lens)
        meta = super().build(common_prefix_len, host, fast_build)
        return dataclasses.replace(meta, query_start_loc=m.query_start_loc, seq_lens=m.seq_lens,
                                   scheduler_metadata=relocated(meta.scheduler_metadata, self.device))


class NeuronKernelAttentionImpl(CPUAttentionBackendImpl):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None, kv_cache_dtype: str,
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None, sinks: torch.Tensor | None = None) -> None:
        refuse_unsupported(alibi_slopes, logits_soft_cap, sinks, kv_cache_dtype)
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                         logits_soft_cap, attn_type, kv_sharing_target_layer_name, sinks)

    def forward(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: CPUAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if attn_metadata is not None and attn_metadata.num_actual_tokens < output.shape[0]:
            output[attn_metadata.num_actual_tokens:] = 0  # a compiled bucket's padding rows: finite values
        return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                               output_block_scale)

    def do_kv_cache_update(self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                           slot_mapping: torch.Tensor) -> None:
        # A compiled bucket's padding tokens have slot -1, which the kernel skips.
        n = slot_mapping.shape[0]
        super().do_kv_cache_update(layer, key[:n], value[:n], kv_cache, slot_mapping)
