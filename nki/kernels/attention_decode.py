"""Decode attention: a few new query tokens per sequence against its KV cache.

q [B, Hq, n, d] holds the newest n tokens of each sequence, already written into the cache
k_cache/v_cache [B, Hkv, L, d/dv] at positions cache_len[b] - n .. cache_len[b] - 1; cache_len [B]
(int32) is the number of valid cache positions of each sequence. Token t sees the cache positions
<= cache_len[b] - n + t (causal among the new tokens, nothing past the valid length).

Grid [B, Hkv]: the G = Hq/Hkv query heads sharing a kv head go on the partitions together
(G * n <= 128 rows), so one matmul per 128-key tile serves the whole group. The valid length is
data: it masks scores (compared against key positions) instead of shortening the loop, so one
kernel serves every length; tiles past the valid length are computed and masked out.
"""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import transposed
from .flash_attention import B, check_heads, default_scale, kv_tiles, normalized, online_softmax


def _last_visible(cache_len: Any, b: int, n: int, rows: int) -> Any:
    """[rows, 1] fp32: the last cache position row r (token r % n of its head) sees."""
    last = nl.ndarray((rows, 1), nl.float32)
    nisa.iota(last, nl.arange(rows)[:, None] % n - n)
    length = nl.load(cache_len.reshape((cache_len.shape[0], 1))[nl.ds(b, 1), :]).broadcast_to((rows, 1))
    nisa.tensor_tensor(last, last, length, nl.add)
    return last


@nki.jit
def decode_attention(q: Any, k_cache: Any, v_cache: Any, cache_len: Any, softmax_scale: float | None = None) -> Any:
    """Grid [B, Hkv]. Returns out [B, Hq, n, dv] in q's dtype. Needs (Hq / Hkv) * n <= 128 and
    n <= cache_len[b] <= L (default scale 1/sqrt(d))."""
    check_heads(q, k_cache, v_cache)
    batch, hq, n, d = q.shape
    hkv, dv = k_cache.shape[1], v_cache.shape[3]
    rows = hq // hkv * n
    assert rows <= B, "decode attention puts a kv head's query heads x tokens on the partitions: at most 128"
    b, g = nl.program_id(0), nl.program_id(1)
    out = nl.ndarray((batch, hq, n, dv), dtype=q.dtype, buffer=nl.shared_hbm)
    # the query heads of a kv group are adjacent: [G, n, d] is one [G * n, d] block
    q_t = transposed(nl.load(q.reshape((batch, hkv, rows, d))[b, g]), q.dtype)     # [d, rows]
    last = _last_visible(cache_len, b, n, rows)
    seen = [(k_t, v_tile, nl.less_equal(k0 + nl.arange(ksz)[None, :], last))
            for k0, ksz, k_t, v_tile in kv_tiles(k_cache, v_cache, b, g)]
    acc, row_sum, _ = online_softmax(q_t, seen, default_scale(d, softmax_scale))
    nl.store(out.reshape((batch, hkv, rows, dv))[b, g], value=normalized(acc, row_sum, q.dtype))
    return out

