"""The library's attention kernels as PyTorch operators (``torch.ops.nki_library.*``, the
namespace of library_ops.py), with autograd.

``flash_attention(q, k, v, scale=None, causal=False, sliding_window=None)`` is differentiable:
its forward operator ``nki_library::flash_attention_fwd`` returns (out, logsumexp) and saves q, k, v, out
and the logsumexp for ``nki_library::flash_attention_bwd``. ``decode_attention`` (``nki_library::decode_attention``)
is forward only. They run on neuron tensors (the kernels launch on the tensors' core), on CPU
tensors (the simulator on the host), and under ``torch.compile`` as single graph nodes.
Layout: q [B, Hq, Sq, d], k/v [B, Hkv, Sk, d] (SDPA's), Hq a multiple of Hkv, d <= 128.
"""
from __future__ import annotations

import torch

from torch_neuronx import nki_op

from .attention_backward import flash_bwd
from .attention_decode import decode_attention as decode_kernel
from .flash_attention import flash_fwd

LIB = "nki_library"


def _grid(k: torch.Tensor) -> tuple[int, int]:
    return k.shape[0], k.shape[1]  # one program per (batch, kv head)


@nki_op(f"{LIB}::flash_attention_fwd", mutates_args=())
def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                        causal: bool = False, sliding_window: int | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, Hq, Sq, dv] in q's dtype, logsumexp [B, Hq, Sq] fp32 of the scaled masked scores)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return flash_fwd[_grid(k)](q, k, v, scale, causal, sliding_window)


@nki_op(f"{LIB}::flash_attention_bwd", mutates_args=())
def flash_attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                        lse: torch.Tensor, scale: float | None = None, causal: bool = False,
                        sliding_window: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention from the gradient of its output and the forward's out and logsumexp."""
    q, k, v, out, dout, lse = (t.contiguous() for t in (q, k, v, out, dout, lse))
    return flash_bwd[_grid(k)](q, k, v, out, dout, lse, scale, causal, sliding_window)


def _save(ctx: torch.autograd.function.FunctionCtx, inputs: tuple, output: tuple) -> None:
    q, k, v, ctx.scale, ctx.causal, ctx.sliding_window = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)


def _backward(ctx: torch.autograd.function.FunctionCtx, dout: torch.Tensor, _dlse: torch.Tensor) -> tuple:
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_bwd(dout, q, k, v, out, lse, ctx.scale, ctx.causal, ctx.sliding_window)
    return dq, dk, dv, None, None, None


flash_attention_fwd.register_autograd(_backward, setup_context=_save)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                    causal: bool = False, sliding_window: int | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v, differentiable. ``scale`` defaults to 1/sqrt(d); with
    ``causal`` query i (at key position i + Sk - Sq) sees keys up to its own; ``sliding_window`` W
    keeps keys less than W positions away (before it, and also after it when not causal)."""
    return flash_attention_fwd(q, k, v, scale, causal, sliding_window)[0]


@nki_op(f"{LIB}::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_len: torch.Tensor,
                     scale: float | None = None) -> torch.Tensor:
    """The n newest tokens q [B, Hq, n, d] against the cache [B, Hkv, L, d] of which cache_len [B]
    positions are valid (the tokens are its last n); (Hq / Hkv) * n <= 128."""
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    return decode_kernel[_grid(k_cache)](q, k_cache, v_cache, cache_len.to(torch.int32), scale)
