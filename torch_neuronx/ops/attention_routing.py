"""scaled_dot_product_attention on neuron tensors through the kernel library's attention kernels.

``torch.nn.functional.scaled_dot_product_attention`` is a composite operator: by default it asks
the device's ``_fused_sdp_choice`` stub (csrc/shim/attention.cpp, the CPU's choice) and runs the
CPU's fused kernel on device memory (``aten::_scaled_dot_product_flash_attention_for_cpu``, a
lowering-table entry). The shim registers a kernel for the operator itself on the neuron device
(the ``AutogradPrivateUse1`` key, and ``PrivateUse1`` for inference mode, which skips autograd
keys); the calls that may be routed (no mask, no dropout, 4-D, a key length the kernels take:
checked in C++, without entering Python) come to :func:`_sdpa` (:func:`install` hands it over),
which sends the calls the kernels handle to ``torch.ops.nki_library``
(``nki/kernels/attention_ops.py``, imported on the first such call):

- ``nki_library::flash_attention_fwd`` (backward ``nki_library::flash_attention_bwd``, through its
  autograd) when
  there is no mask and no dropout, q/k/v are 4-D [B, H, S, d] of one float dtype (fp32, bf16,
  fp16) on one device, d <= 128, the kv heads divide the query heads (GQA needs
  ``enable_gqa=True``), at least one full key tile (128 keys) and at most MAX_SEQ rows per
  sequence, and with ``is_causal`` equal query and key lengths (PyTorch aligns the causal mask
  top-left, the kernels bottom-right: they agree only then);
- ``nki_library::decode_attention`` for one query token without gradients (generation with a KV cache);
- everything else keeps the composite path unchanged.

Operator tracking names the path: ``nki_library::flash_attention_fwd`` / ``nki_library::decode_attention``
next to ``aten::scaled_dot_product_attention``, or ``aten::_scaled_dot_product_flash_attention_for_cpu``.
Switch: ``TORCH_NEURONX_NKI_SDPA=0`` in the environment, or :func:`set_nki_sdpa_enabled`.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from .. import _C
from ..runtime.topology import env_flag

ENV_VAR = "TORCH_NEURONX_NKI_SDPA"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIN_KEYS = 128      # one key tile: shorter attention stays on the host's fused kernel
MAX_SEQ = 8192      # query rows of a kv group and keys per sequence: the kernels keep them in SBUF
MAX_HEAD_DIM = 128  # the contraction of q k^T on the partitions

_enabled: bool | None = None  # None: from the environment, read at the first call


def set_nki_sdpa_enabled(enabled: bool) -> None:
    """Route scaled_dot_product_attention on neuron tensors to the kernel library (True, the
    default unless ``TORCH_NEURONX_NKI_SDPA=0``) or keep the fused host kernel for every call."""
    global _enabled
    _enabled = bool(enabled)


def nki_sdpa_enabled() -> bool:
    global _enabled
    if _enabled is None:
        _enabled = env_flag(os.environ, ENV_VAR, default=True)
    return _enabled


def route(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
          dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> str | None:
    """The ``torch.ops.nki_library`` operator an SDPA call runs ("flash_attention_fwd" or
    "decode_attention"), or None for the composite path."""
    if not nki_sdpa_enabled() or attn_mask is not None or dropout_p > 0.0:
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


def _sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
          enable_gqa: bool = False) -> torch.Tensor:
    op = route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if op is None:
        return torch.ops.aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    from nki.kernels import attention_ops  # the kernel-language layer sits above this package
    if op == "decode_attention":
        lengths = torch.full((query.shape[0],), key.shape[2], dtype=torch.int32, device=query.device)
        return attention_ops.decode_attention(query, key, value, lengths, scale)
    return attention_ops.flash_attention(query, key, value, scale, is_causal)


def install() -> None:
    """Hand the routing function to the shim's kernel (importing nki waits for the first routed call)."""
    _C._set_sdpa_router(_sdpa, MIN_KEYS, MAX_SEQ)
