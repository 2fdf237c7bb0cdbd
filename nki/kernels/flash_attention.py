"""Causal flash-attention forward: softmax(q k^T * scale, causal) v with an online softmax over
128-key tiles; q, k, v are [seq, d] with d <= 128 and seq a multiple of 128."""
from __future__ import annotations

from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def flash_attention_fwd(q: Any, k: Any, v: Any, softmax_scale: float | None = None) -> Any:
    S, d = q.shape
    B = nl.tile_size.pmax
    assert d <= B and S % B == 0, "need d <= 128 and seq a multiple of 128"
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / float(np.sqrt(d))
    out = nl.ndarray((S, d), dtype=q.dtype, buffer=nl.shared_hbm)
    i_q = nl.arange(B)[:, None]
    i_k = nl.arange(B)[None, :]

    for qi in nl.affine_range(S // B):
        q_t = nl.copy(nisa.nc_transpose(nl.load(q[nl.ds(qi * B, B), :])), dtype=q.dtype)  # [d, Bq]
        row_max = nl.full((B, 1), -np.inf, nl.float32)
        row_sum = nl.zeros((B, 1), nl.float32)
        acc = nl.zeros((B, d), nl.float32)
        for kj in nl.sequential_range(qi + 1):      # causal: key tiles up to the diagonal
            k_t = nl.copy(nisa.nc_transpose(nl.load(k[nl.ds(kj * B, B), :])), dtype=k.dtype)
            v_tile = nl.load(v[nl.ds(kj * B, B), :])
            scores = nisa.tensor_scalar(nisa.nc_matmul(q_t, k_t), nl.multiply, scale,
                                        dtype=nl.float32)                        # [Bq, Bk]
            if kj == qi:
                scores = nl.where(i_q >= i_k, scores, -np.inf)
            new_max = nl.maximum(row_max, nl.max(scores, axis=1, keepdims=True))
            p = nisa.activation(nl.exp, scores, bias=nl.negative(new_max))
            alpha = nisa.activation(nl.exp, row_max, bias=nl.negative(new_max))
            row_sum = row_sum * alpha + nl.sum(p, axis=1, keepdims=True)
            p_t = nl.copy(nisa.nc_transpose(nl.copy(p, dtype=v.dtype)), dtype=v.dtype)  # [Bk, Bq]
            acc = nisa.tensor_scalar(acc, nl.multiply, alpha) + nisa.nc_matmul(p_t, v_tile)
            row_max = new_max
        nl.store(out[nl.ds(qi * B, B), :], value=nisa.tensor_scalar(acc, nl.divide, row_sum,
                                                                     dtype=q.dtype))
    return out
