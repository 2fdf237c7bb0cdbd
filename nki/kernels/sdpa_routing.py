"""Which ``scaled_dot_product_attention`` calls on neuron tensors this library's attention
kernels run, and running them.

The device sends the calls that may be routed to the router registered with it
(``torch_neuronx/ops/attention_routing.py``); this module registers :func:`run` when the device
loads it through the ``torch_neuronx.sdpa_routers`` entry point, at the first such call. It runs:

- ``nki_library::flash_attention_fwd`` (backward ``nki_library::flash_attention_bwd``, through its
  autograd) when there is no mask and no dropout, q/k/v are 4-D [B, H, S, d] of one float dtype
  (fp32, bf16, fp16) on one device, d <= 128, the kv heads divide the query heads (GQA needs
  ``enable_gqa=True``), at least one full key tile (128 keys) and at most MAX_SEQ rows per
  sequence, and with ``is_causal`` equal query and key lengths (PyTorch aligns the causal mask
  top-left, the kernels bottom-right: they agree only then);
- ``nki_library::decode_attention`` for one query token without gradients (generation with a KV cache);
- nothing for every other call (None: the device keeps the composite path).
"""
from __future__ import annotations

from typing import Any

import torch

from torch_neuronx.ops import attention_routing

from . import attention_ops

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIN_KEYS = 128      # one key tile: shorter attention stays on the host's fused kernel
MAX_SEQ = 8192      # query rows of a kv group and keys per sequence: the kernels keep them in SBUF
MAX_HEAD_DIM = 128  # the contraction of q k^T on the partitions


def route(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
          dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> str | None:
    """The ``torch.ops.nki_library`` operator an SDPA call runs ("flash_attention_fwd" or
    "decode_attention"), or None for the composite path."""
    if attn_mask is not None or dropout_p > 0.0:
        return None
    qkv = (query, key, value)
    if any(t.dim() != 4 or t.is_nested or t.dtype != query.dtype or t.device != query.device for t in qkv):
        return None
    (batch, hq, seq_q, d), (batch_k, hkv, seq_k, d_k) = query.shape, key.shape
    if (query.dtype not in DTYPES or batch_k != batch or value.shape[:3] != key.shape[:3] or d_k != d
            or max(d, value.shape[3]) > MAX_HEAD_DIM or hq % hkv or (hq != hkv and not enable_gqa)):
        return None
    if not MIN_KEYS <= seq_k <= MAX_SEQ or not 1 <= seq_q * (hq // hkv) <= MAX_SEQ or (is_causal and seq_q != seq_k):
        return None
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in qkv)
    if seq_q == 1 and not needs_grad and hq // hkv <= MAX_HEAD_DIM:
        return "decode_attention"
    return "flash_attention_fwd"


def run(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
        enable_gqa: bool = False) -> torch.Tensor | None:
    """The call's result from this library's kernels, or None when they do not handle it."""
    op = route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if op == "decode_attention":
        lengths = torch.full((query.shape[0],), key.shape[2], dtype=torch.int32, device=query.device)
        return attention_ops.decode_attention(query, key, value, lengths, scale)
    if op == "flash_attention_fwd":
        return attention_ops.flash_attention(query, key, value, scale, is_causal)
    return None


def register() -> None:
    """The ``torch_neuronx.sdpa_routers`` entry point: hand :func:`run` and its key lengths to the device."""
    attention_routing.register_router(run, MIN_KEYS, MAX_SEQ)
