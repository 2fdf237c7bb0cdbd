"""Flash-attention backward (FlashAttention-2 order): dq, dk, dv from dout, the forward's inputs,
its output and the logsumexp it returned (`flash_fwd`).

Grid [B, Hkv]: a program owns one kv head, so dk/dv of a GQA group accumulate over every query
head of the group in PSUM without crossing programs. Key tiles are the outer loop (their dk/dv
accumulate in PSUM over the query tiles that see them); dq accumulates in SBUF fp32 across key
tiles. Per (query tile, key tile), with s the raw scores:
  p = exp(scale * s - lse)          dv += p^T do        dp = do v^T
  ds = p * (dp - D) * scale         dk += ds^T q        dq += ds k
where D = rowsum(do * o). Matmul operands are rounded to the input dtype, accumulation is fp32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import tiles, transposed
from .flash_attention import Visibility, check_heads, default_scale, masked


@dataclass
class _QueryTile:
    """What every key tile needs of one query tile of one head, loaded once."""

    h: int
    q0: int
    qsz: int
    q: Any       # [qsz, d]
    q_t: Any     # [d, qsz]
    do: Any      # [qsz, dv]
    do_t: Any    # [dv, qsz]
    neg_lse: Any  # [qsz, 1] fp32
    delta: Any   # [qsz, 1] fp32: rowsum(do * o)
    dq: Any      # [qsz, d] fp32 accumulator


def _query_tile(q: Any, out: Any, dout: Any, lse: Any, b: int, h: int, q0: int, qsz: int) -> _QueryTile:
    rows = nl.ds(q0, qsz)
    q_tile, do = nl.load(q[b, h, rows, :]), nl.load(dout[b, h, rows, :])
    o_do = nl.ndarray(do.shape, nl.float32)
    nisa.tensor_tensor(o_do, do, nl.load(out[b, h, rows, :]), nl.multiply)
    delta = nl.ndarray((qsz, 1), nl.float32)
    nisa.tensor_reduce(delta, nl.add, o_do, axis=1, keepdims=True)
    neg_lse = nl.ndarray((qsz, 1), nl.float32)
    nisa.tensor_scalar(neg_lse, nl.load(lse.reshape((*lse.shape, 1))[b, h, rows, :]), nl.multiply, -1.0)
    return _QueryTile(h, q0, qsz, q_tile, transposed(q_tile, q.dtype), do, transposed(do, dout.dtype),
                      neg_lse, delta, nl.zeros((qsz, q.shape[3]), nl.float32))


def _backward_program(q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, dq: Any, dk: Any, dv: Any,
                      b: int, g: int, scale: float, visibility: Visibility) -> None:
    group, dtype = q.shape[1] // k.shape[1], q.dtype
    queries = [_query_tile(q, out, dout, lse, b, h, q0, qsz)
               for h in range(g * group, (g + 1) * group) for q0, qsz in tiles(q.shape[2])]
    for k0, ksz in tiles(k.shape[2]):
        k_tile, v_tile = nl.load(k[b, g, nl.ds(k0, ksz), :]), nl.load(v[b, g, nl.ds(k0, ksz), :])
        k_t, v_t = transposed(k_tile, dtype), transposed(v_tile, dtype)
        dk_acc = nl.zeros((ksz, k.shape[3]), nl.float32, buffer=nl.psum)
        dv_acc = nl.zeros((ksz, v.shape[3]), nl.float32, buffer=nl.psum)
        for t in queries:
            visible = visibility.tile(t.q0, t.qsz, k0, ksz)
            if visible is None:
                continue
            s = nl.ndarray((t.qsz, ksz), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(s, t.q_t, k_t)
            p = nl.ndarray((t.qsz, ksz), nl.float32)
            nisa.activation(p, nl.exp, masked(s, visible), bias=t.neg_lse, scale=scale)
            # contraction over the query rows (the partitions of p and ds): no transpose needed
            nisa.nc_matmul(dv_acc, nl.copy(p, dtype=dtype), t.do)
            dp = nl.ndarray((t.qsz, ksz), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dp, t.do_t, v_t)
            ds = nl.ndarray((t.qsz, ksz), nl.float32)
            nisa.tensor_scalar(ds, dp, nl.subtract, t.delta, op1=nl.multiply, operand1=scale)
            ds_in = nl.ndarray((t.qsz, ksz), dtype)
            nisa.tensor_tensor(ds_in, ds, p, nl.multiply)
            nisa.nc_matmul(dk_acc, ds_in, t.q)
            dq_part = nl.ndarray((t.qsz, q.shape[3]), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dq_part, transposed(ds_in, dtype), k_tile)
            nisa.tensor_tensor(t.dq, t.dq, dq_part, nl.add)
        nl.store(dk[b, g, nl.ds(k0, ksz), :], value=nl.copy(dk_acc, dtype=k.dtype))
        nl.store(dv[b, g, nl.ds(k0, ksz), :], value=nl.copy(dv_acc, dtype=v.dtype))
    for t in queries:
        nl.store(dq[b, t.h, nl.ds(t.q0, t.qsz), :], value=nl.copy(t.dq, dtype=dtype))


@nki.jit
def flash_bwd(q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, softmax_scale: float | None = None,
              causal: bool = False, sliding_window: int | None = None) -> Any:
    """Grid [B, Hkv]. Shapes and options as `flash_fwd`; out/lse are its results and dout the
    gradient of out. Returns (dq, dk, dv) in the dtypes of q, k, v."""
    check_heads(q, k, v)
    visibility = Visibility.check(q.shape[2], k.shape[2], causal, sliding_window)
    dq = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray(k.shape, dtype=k.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
    _backward_program(q, k, v, out, dout, lse, dq, dk, dv, nl.program_id(0), nl.program_id(1),
                      default_scale(q.shape[3], softmax_scale), visibility)
    return dq, dk, dv
