"""Flash-attention forward: softmax(q k^T * scale, mask) v with an online softmax over 128-key
tiles, returning the row logsumexp the backward needs.

`flash_fwd` takes the SDPA layout q [B, Hq, Sq, d], k/v [B, Hkv, Sk, d] (Hq a multiple of Hkv:
GQA/MQA) and runs on a grid [B, Hkv]: each program attends the Hq/Hkv query heads of one kv head
with that head's K^T and V tiles loaded once. `flash_attention_fwd` is the single-head causal
form [seq, d] on the same code. Shared pieces (key visibility, the online softmax) are used by
the backward (attention_backward.py) and the decode kernel (attention_decode.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import tiles, transposed

B = nl.tile_size.pmax  # 128 query rows / keys per tile
# Masked scores: finite, so that a row whose keys are all masked in the tiles seen so far gives
# exp(0) weights instead of NaN; the first visible key then rescales them away (alpha = 0).
MASKED = -1.0e30


def default_scale(d: int, softmax_scale: float | None) -> float:
    return float(softmax_scale) if softmax_scale is not None else 1.0 / float(np.sqrt(d))


@dataclass(frozen=True)
class Visibility:
    """Which keys a query sees. Query i sits at key position i + offset (offset = Sk - Sq: the
    queries are the last Sq positions, "bottom-right" alignment); `causal` hides keys after it;
    `window` W keeps only keys less than W positions away (before it; also after it when not
    causal)."""

    causal: bool
    window: int | None
    offset: int
    seq_k: int

    def keys(self, pos: int) -> tuple[int, int]:
        """Inclusive range of keys visible from key position `pos`."""
        lo = 0 if self.window is None else max(0, pos - self.window + 1)
        hi = pos if self.causal else (self.seq_k - 1 if self.window is None else pos + self.window - 1)
        return lo, min(hi, self.seq_k - 1)

    def tile(self, q0: int, qsz: int, k0: int, ksz: int) -> Any:
        """None if no query of rows [q0, q0+qsz) sees a key of [k0, k0+ksz); True if all see all
        of them; else the [qsz, ksz] boolean index expression of the visible pairs."""
        first, last = q0 + self.offset, q0 + qsz - 1 + self.offset
        k1 = k0 + ksz - 1
        if k1 < self.keys(first)[0] or k0 > self.keys(last)[1]:
            return None
        if self.keys(last)[0] <= k0 and k1 <= self.keys(first)[1]:
            return True
        pos = first + nl.arange(qsz)[:, None]
        key = k0 + nl.arange(ksz)[None, :]
        visible = np.ones((qsz, ksz), bool)
        if self.causal:
            visible &= key <= pos
        if self.window is not None:
            visible &= np.abs(pos - key) < self.window
        return visible

    @staticmethod
    def check(seq_q: int, seq_k: int, causal: bool, window: int | None) -> Visibility:
        assert not causal or seq_q <= seq_k, "causal attention needs seq_q <= seq_k (queries are the last positions)"
        assert window is None or window >= 1, "sliding_window counts keys: >= 1"
        return Visibility(causal, window, seq_k - seq_q, seq_k)


def masked(scores: Any, visible: Any) -> Any:
    """The scores where `visible` (True, an index expression or a 0/1 tile), MASKED elsewhere."""
    return scores if visible is True else nl.where(visible, scores, MASKED, dtype=nl.float32)


def online_softmax(q_t: Any, kv: list[tuple[Any, Any, Any]], scale: float) -> tuple[Any, Any, Any]:
    """Attention of the query rows q_t [d, R] over key tiles kv = [(k_t [d, K], v [K, dv], visible)],
    visible as for `masked`. Returns (acc [R, dv] fp32 = unnormalized output, row sum, row max of
    the raw scores), so out = acc / sum and logsumexp = scale * max + log(sum)."""
    rows, dv = q_t.shape[1], kv[0][1].shape[1]
    row_max = nl.full((rows, 1), MASKED, nl.float32)
    row_sum = nl.zeros((rows, 1), nl.float32)
    acc = nl.zeros((rows, dv), nl.float32)
    for k_t, v_tile, visible in kv:
        qk = nl.ndarray((rows, k_t.shape[1]), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(qk, q_t, k_t)
        scores = masked(qk, visible)
        new_max = nl.ndarray((rows, 1), nl.float32)
        nisa.tensor_reduce(new_max, nl.maximum, scores, axis=1, keepdims=True)
        nisa.tensor_tensor(new_max, new_max, row_max, nl.maximum)
        bias = nl.ndarray((rows, 1), nl.float32)
        nisa.tensor_scalar(bias, new_max, nl.multiply, -scale)
        # p = exp(scale * s - scale * max) in v's dtype (the PV matmul operand), its row sum
        # from ScalarE's reduction registers in the same instruction
        p = nl.ndarray(qk.shape, v_tile.dtype)
        p_sum = nl.ndarray((rows, 1), nl.float32)
        nisa.activation(p, nl.exp, scores, bias=bias, scale=scale, reduce_op=nl.add, reduce_res=p_sum,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        alpha = nl.ndarray((rows, 1), nl.float32)  # rescales what was accumulated under the old max
        nisa.activation(alpha, nl.exp, row_max, bias=bias, scale=scale)
        nisa.tensor_scalar(row_sum, row_sum, nl.multiply, alpha, op1=nl.add, operand1=p_sum)
        pv = nl.ndarray((rows, dv), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(pv, transposed(p, v_tile.dtype), v_tile)
        nisa.tensor_scalar(acc, acc, nl.multiply, alpha)
        nisa.tensor_tensor(acc, acc, pv, nl.add)
        row_max = new_max
    return acc, row_sum, row_max


def normalized(acc: Any, row_sum: Any, dtype: Any) -> Any:
    o = nl.ndarray(acc.shape, dtype)
    nisa.tensor_scalar(o, acc, nl.divide, row_sum)
    return o


def logsumexp(row_sum: Any, row_max: Any, scale: float) -> Any:
    log_sum = nl.ndarray(row_sum.shape, nl.float32)
    nisa.activation(log_sum, nl.log, row_sum)
    lse = nl.ndarray(row_sum.shape, nl.float32)
    nisa.tensor_scalar(lse, row_max, nl.multiply, scale, op1=nl.add, operand1=log_sum)
    return lse


def kv_tiles(k: Any, v: Any, b: int, g: int) -> list[tuple[int, int, Any, Any]]:
    """(k0, ksz, K^T [d, ksz], V [ksz, dv]) of every key tile of kv head (b, g), loaded once."""
    return [(k0, ksz, transposed(nl.load(k[b, g, nl.ds(k0, ksz), :]), k.dtype), nl.load(v[b, g, nl.ds(k0, ksz), :]))
            for k0, ksz in tiles(k.shape[2])]


def _forward_program(q: Any, k: Any, v: Any, out: Any, lse: Any, b: int, g: int, scale: float,
                     visibility: Visibility) -> None:
    """Attention of the query heads of kv head (b, g) into out (and lse unless None)."""
    group = q.shape[1] // k.shape[1]
    kv = kv_tiles(k, v, b, g)
    for h in range(g * group, (g + 1) * group):
        for q0, qsz in tiles(q.shape[2]):
            q_t = transposed(nl.load(q[b, h, nl.ds(q0, qsz), :]), q.dtype)           # [d, qsz]
            seen = [(k_t, v_tile, visible) for k0, ksz, k_t, v_tile in kv
                    if (visible := visibility.tile(q0, qsz, k0, ksz)) is not None]
            acc, row_sum, row_max = online_softmax(q_t, seen, scale)
            nl.store(out[b, h, nl.ds(q0, qsz), :], value=normalized(acc, row_sum, q.dtype))
            if lse is not None:
                nl.store(lse[b, h, nl.ds(q0, qsz)], value=logsumexp(row_sum, row_max, scale))


def check_heads(q: Any, k: Any, v: Any) -> None:
    (batch, hq, _, d), (bk, hkv, _, dk) = q.shape, k.shape
    assert d <= B and v.shape[3] <= B, "head dims must be <= 128"
    assert dk == d and bk == batch and v.shape[:3] == k.shape[:3], "q, k, v shapes do not match"
    assert hq % hkv == 0, "the query heads must be a multiple of the kv heads (GQA/MQA)"


@nki.jit
def flash_fwd(q: Any, k: Any, v: Any, softmax_scale: float | None = None, causal: bool = False,
              sliding_window: int | None = None) -> Any:
    """Grid [B, Hkv]. q [B, Hq, Sq, d], k/v [B, Hkv, Sk, d/dv] with d, dv <= 128, any lengths
    (causal: Sq <= Sk, queries at the last positions). Returns (out [B, Hq, Sq, dv] in q's dtype,
    lse [B, Hq, Sq] fp32: logsumexp of the scaled, masked scores)."""
    check_heads(q, k, v)
    batch, hq, seq_q, _ = q.shape
    visibility = Visibility.check(seq_q, k.shape[2], causal, sliding_window)
    out = nl.ndarray((batch, hq, seq_q, v.shape[3]), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((batch, hq, seq_q), dtype=nl.float32, buffer=nl.shared_hbm)
    _forward_program(q, k, v, out, lse, nl.program_id(0), nl.program_id(1),
                     default_scale(q.shape[3], softmax_scale), visibility)
    return out, lse


@nki.jit
def flash_attention_fwd(q: Any, k: Any, v: Any, softmax_scale: float | None = None) -> Any:
    """Causal attention of one head: q, k, v [seq, d], d <= 128; only key tiles up to the
    diagonal are computed. Default scale 1/sqrt(d)."""
    seq, d = q.shape
    assert d <= B, "need d <= 128"
    out = nl.ndarray((seq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    heads = [t.reshape((1, 1, seq, d)) for t in (q, k, v, out)]
    _forward_program(*heads, None, 0, 0, default_scale(d, softmax_scale), Visibility.check(seq, seq, True, None))
    return out
