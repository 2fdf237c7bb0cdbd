"""Paged attention on ``neuron`` tensors: vLLM's attention backend for the neuron platform.

The KV cache of a layer is one device tensor of blocks, ``[num_blocks, block_size, kv_heads,
2 * head_size]`` in memory (vLLM's ``LBNHC`` layout; keys in the first half of the last axis,
values in the second). Each step:

- the new tokens' keys and values are written to their slots with one ``index_copy_``;
- the decode requests (one new token each) attend together: their blocks are gathered through the
  block table into ``[requests, context, kv_heads, head_size]`` and one
  ``scaled_dot_product_attention`` call with a length mask reads them;
- the prefill requests (prompt chunks) attend together the same way, their query rows padded to
  the longest chunk, with a causal (and sliding-window) mask offset by the tokens already cached.

The metadata builder computes the gather indices and masks once per step on the host (it has the
sequence lengths there) and copies them to the device; every layer reuses them. With
``neuron_config`` ``attention="nki"`` the decode group runs the kernel library's decode attention
kernel on the gathered blocks instead (masked past each request's length), and a step whose
prefills are all whole prompts runs each by its flash attention kernel, where they fit.
This backend serves ``attention="sdpa"``/``"nki"`` and whatever vLLM's C++ paged-attention
kernel does not cover (vllm_neuron/kernel_attention.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.kv_cache_interface import KVCacheLayout

from nki.kernels.attention_ops import decode_attention, flash_attention
from vllm_neuron.options import neuron_option


class NeuronPagedAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[NeuronPagedAttentionImpl]:
        return NeuronPagedAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[NeuronPagedAttentionMetadataBuilder]:
        return NeuronPagedAttentionMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class RequestGroup:
    """Requests that attend in one call: the cache blocks each reads, which query rows it has
    (padded), and which keys each row sees."""
    blocks: torch.Tensor      # [requests, blocks] int64: block-table rows
    mask: torch.Tensor        # [requests, 1, max_query_len, blocks * block_size] bool
    tokens: slice             # the group's rows of `query` and `output`
    # Prefill chunks only (decodes read their consecutive rows as a view):
    rows: torch.Tensor | None       # [requests, max_query_len] int64: rows of `query` (padding repeats a row)
    real_rows: torch.Tensor | None  # [tokens] int64: where each is in the padded [requests * max_query_len]
    # Decodes run by the kernel library's decode kernel only (attention="nki"): each one's context length.
    lengths: torch.Tensor | None = None  # [requests] int32


@dataclass
class NeuronPagedAttentionMetadata:
    num_real_tokens: int  # the scheduled tokens; the rest of the step's rows pad a bucket
    slot_mapping: torch.Tensor
    groups: list[RequestGroup]
    # attention="nki", a step whose prefills are all whole prompts: each one's rows, attended by
    # the kernel library's flash attention kernel on the step's own keys and values.
    prompts: list[slice] = dataclasses.field(default_factory=list)


def _request_group(block_table: torch.Tensor, starts: torch.Tensor, query_lens: torch.Tensor,
                   seq_lens: torch.Tensor, block_size: int, window: int | None,
                   device: torch.device, kernel_library: bool) -> RequestGroup:
    """The gather indices and mask of requests with these (host) query start rows, query lengths
    and context lengths."""
    max_query = int(query_lens.max())
    num_blocks = -(-int(seq_lens.max()) // block_size)
    row = torch.arange(max_query)
    real = row[None, :] < query_lens[:, None]                                  # [R, Q]
    rows = starts[:, None] + torch.where(real, row[None, :], 0)                # padding reads row 0 of its request
    query_pos = (seq_lens - query_lens)[:, None] + row[None, :]                # [R, Q]: position of each query row
    key_pos = torch.arange(num_blocks * block_size)
    mask = (key_pos[None, None, :] <= query_pos[:, :, None]) & (key_pos[None, None, :] < seq_lens[:, None, None])
    if window is not None:
        mask &= key_pos[None, None, :] > query_pos[:, :, None] - window
    mask &= real[:, :, None]
    mask[:, :, 0] |= ~real                                                     # a padding row sees one key: no NaN
    first = int(starts[0])
    prefill = max_query > 1
    return RequestGroup(
        blocks=block_table[: len(starts), :num_blocks].to(torch.int64),
        mask=mask[:, None].to(device, non_blocking=True),
        tokens=slice(first, first + int(query_lens.sum())),
        rows=rows.to(device, non_blocking=True) if prefill else None,
        real_rows=real.flatten().nonzero().squeeze(1).to(device, non_blocking=True) if prefill else None,
        lengths=seq_lens.to(torch.int32).to(device, non_blocking=True) if kernel_library and not prefill else None,
    )


def kernel_library_fits(vllm_config: Any, window: int | None) -> bool:
    """Whether the kernel library's attention kernels serve this layer group (``neuron_config``
    ``attention="nki"``): no sliding window (the decode kernel has none), and a kv head's query
    heads and the head size within the 128 partitions."""
    if neuron_option(vllm_config, "attention") != "nki" or window is not None:
        return False
    heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    kv_heads = vllm_config.model_config.get_num_kv_heads(vllm_config.parallel_config)
    return heads // kv_heads <= 128 and vllm_config.model_config.get_head_size() <= 128


class NeuronPagedAttentionMetadataBuilder(AttentionMetadataBuilder[NeuronPagedAttentionMetadata]):
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.window = getattr(kv_cache_spec, "sliding_window", None)
        self.kernel_library = kernel_library_fits(vllm_config, self.window)
        self._init_reorder_batch_threshold(1)  # decodes first, then prefills

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> NeuronPagedAttentionMetadata:
        m = common_attn_metadata
        n = m.num_reqs
        starts = m.query_start_loc_cpu[: n + 1].to(torch.int64)
        seq_lens = m.seq_lens_cpu_upper_bound  # exact without speculative decoding, which is not enabled here
        seq_lens = (m.seq_lens[:n].cpu() if seq_lens is None else seq_lens[:n]).to(torch.int64)
        num_decodes, _, _, _ = split_decodes_and_prefills(m, decode_threshold=1)
        query_lens = starts[1:] - starts[:-1]
        groups, prompts = [], []
        if self.kernel_library and num_decodes < n and bool((seq_lens[num_decodes:] == query_lens[num_decodes:]).all()):
            prompts = [slice(int(starts[i]), int(starts[i + 1])) for i in range(num_decodes, n)]
        for lo, hi in ((0, num_decodes), (num_decodes, n if not prompts else num_decodes)):
            if hi > lo:
                groups.append(_request_group(m.block_table_tensor[lo:hi], starts[lo:hi], query_lens[lo:hi],
                                             seq_lens[lo:hi], self.block_size, self.window, self.device,
                                             self.kernel_library))
        return NeuronPagedAttentionMetadata(num_real_tokens=int(starts[-1]), slot_mapping=m.slot_mapping,
                                            groups=groups, prompts=prompts)


def refuse_unsupported(alibi_slopes: list[float] | None, logits_soft_cap: float | None, sinks: torch.Tensor | None,
                       kv_cache_dtype: str) -> None:
    """What neither attention backend supports here (untested on neuron): a clear start-up error."""
    unsupported = [name for name, given in (("ALiBi slopes", alibi_slopes is not None),
                                            ("a logits soft cap", bool(logits_soft_cap)),
                                            ("attention sinks", sinks is not None),
                                            (f"kv_cache_dtype={kv_cache_dtype}", kv_cache_dtype != "auto"))
                   if given]
    if unsupported:
        raise NotImplementedError(f"vllm_neuron: paged attention on neuron does not support "
                                  f"{', '.join(unsupported)}; serve a model without them")


class NeuronPagedAttentionImpl(AttentionImpl):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None) -> None:
        refuse_unsupported(alibi_slopes, logits_soft_cap, sinks, kv_cache_dtype)
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads

    @staticmethod
    def _slots(kv_cache: torch.Tensor) -> torch.Tensor:
        """The cache as [num_blocks * block_size, kv_heads, 2 * head_size] (a view: LBNHC keeps a
        block's tokens outermost)."""
        blocks, heads, block_size, width = kv_cache.shape
        return kv_cache.permute(0, 2, 1, 3).view(blocks * block_size, heads, width)

    def do_kv_cache_update(self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                           slot_mapping: torch.Tensor) -> None:
        """Write the step's keys and values to their slots. Padding tokens (slot -1, a compiled
        model's bucket) write to slot 0, in vLLM's null block, which no request reads."""
        n = min(key.shape[0], slot_mapping.shape[0])
        slots = slot_mapping[:n].to(torch.int64).clamp(min=0)
        self._slots(kv_cache).index_copy_(0, slots, torch.cat((key[:n], value[:n]), -1))

    def forward(self, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: NeuronPagedAttentionMetadata | None, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if attn_metadata is None:  # vLLM's profiling and dummy runs
            return output
        cache = kv_cache.permute(0, 2, 1, 3)  # [blocks, block_size, kv_heads, 2 * head_size]
        if attn_metadata.num_real_tokens < output.shape[0]:
            output[attn_metadata.num_real_tokens:] = 0  # padding rows: finite values into the next layer
        d = self.head_size
        for rows in attn_metadata.prompts:  # whole prompts: their own keys, causal
            q, k, v = (t[rows].transpose(0, 1)[None] for t in (query, key, value))
            output[rows] = flash_attention(q, k, v, self.scale, causal=True)[0].transpose(0, 1).reshape_as(output[rows])
        for group in attn_metadata.groups:
            requests, _, max_query, _ = group.mask.shape
            kv = cache[group.blocks].flatten(1, 2)                   # [R, context, kv_heads, 2D]
            k = kv[..., :d].transpose(1, 2)
            v = kv[..., d:].transpose(1, 2)
            # Decodes (one row each) are consecutive rows: a view, where prefill chunks are gathered.
            q = query[group.tokens, :, None] if group.rows is None else query[group.rows].transpose(1, 2)
            if group.lengths is not None:  # the kernel library's decode kernel masks past each length
                o = decode_attention(q, k, v, group.lengths, self.scale)
            else:
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=group.mask, scale=self.scale,
                                                   enable_gqa=self.num_heads != self.num_kv_heads)
            if group.rows is None:
                output[group.tokens] = o.view_as(output[group.tokens])
            else:
                o = o.transpose(1, 2).reshape(requests * max_query, self.num_heads, d)
                output[group.tokens] = o.index_select(0, group.real_rows).view_as(output[group.tokens])
        return output
