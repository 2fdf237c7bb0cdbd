"""Causal flash-attention forward: softmax(q k^T * scale, causal) v with an online softmax over
128-key tiles; q, k, v are [seq, d] with d <= 128 and seq a multiple of 128."""
from __future__ import annotations

from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _transposed(x: Any, dtype: Any) -> Any:
    """x [P, F] (SBUF) transposed on TensorE and copied back to SBUF as [F, P] in `dtype`."""
    t = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.psum)
    nisa.nc_transpose(t, x)
    return nl.copy(t, dtype=dtype)


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
        q_t = _transposed(nl.load(q[nl.ds(qi * B, B), :]), q.dtype)               # [d, Bq]
        row_max = nl.full((B, 1), -np.inf, nl.float32)
        row_sum = nl.zeros((B, 1), nl.float32)
        acc = nl.zeros((B, d), nl.float32)
        for kj in nl.sequential_range(qi + 1):      # causal: key tiles up to the diagonal
            k_t = _transposed(nl.load(k[nl.ds(kj * B, B), :]), k.dtype)
            v_tile = nl.load(v[nl.ds(kj * B, B), :])
            qk = nl.ndarray((B, B), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(qk, q_t, k_t)
            scores = nl.ndarray((B, B), nl.float32)
            nisa.tensor_scalar(scores, qk, nl.multiply, scale)                     # [Bq, Bk]
            if kj == qi:
                scores = nl.where(i_q >= i_k, scores, -np.inf)
            new_max = nl.maximum(row_max, nl.max(scores, axis=1, keepdims=True))
            neg_max = nl.negative(new_max)
            p = nl.ndarray((B, B), nl.float32)
            p_sum = nl.ndarray((B, 1), nl.float32)
            nisa.activation(p, nl.exp, scores, bias=neg_max, reduce_op=nl.add, reduce_res=p_sum,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce)
            alpha = nl.ndarray((B, 1), nl.float32)
            nisa.activation(alpha, nl.exp, row_max, bias=neg_max)
            row_sum = row_sum * alpha + p_sum
            p_t = _transposed(nl.copy(p, dtype=v.dtype), v.dtype)                  # [Bk, Bq]
            pv = nl.ndarray((B, d), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(pv, p_t, v_tile)
            nisa.tensor_scalar(acc, acc, nl.multiply, alpha)
            acc = acc + pv
            row_max = new_max
        o = nl.ndarray((B, d), q.dtype)
        nisa.tensor_scalar(o, acc, nl.divide, row_sum)
        nl.store(out[nl.ds(qi * B, B), :], value=o)
    return out
