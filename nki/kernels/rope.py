"""Rotary position embedding: each pair (x1, x2) of a head's features is rotated by its angle,
(x1 cos - x2 sin, x2 cos + x1 sin), positions on partitions.

Pairs are the two halves of the head (Hugging Face's `rotate_half`: x1 = x[:d/2], x2 = x[d/2:])
or neighbours (`interleaved`: x1 = x[0::2], x2 = x[1::2], GPT-J / Meta Llama). The backward is
the rotation by the negative angle (`inverse=True`)."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import tiles


@nki.jit
def rope(x: Any, cos: Any, sin: Any, interleaved: bool = False, inverse: bool = False) -> Any:
    """x [N, S, D] (N = batch x heads), cos / sin [S, D/2] (one angle per pair, shared by the N
    sequences): the rotated x [N, S, D] in x's dtype."""
    N, S, D = x.shape
    half = D // 2
    assert D % 2 == 0 and cos.shape == (S, half) and sin.shape == (S, half), "need cos, sin [S, D/2]"
    first, second = (slice(0, D, 2), slice(1, D, 2)) if interleaved else (slice(0, half), slice(half, D))
    # forward: (x1 c - x2 s, x2 c + x1 s); inverse: (x1 c + x2 s, x2 c - x1 s)
    combine_first, combine_second = (nl.add, nl.subtract) if inverse else (nl.subtract, nl.add)
    out = nl.ndarray((N, S, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for s0, ssz in tiles(S):
        c = nl.load(cos[nl.ds(s0, ssz), :], dtype=nl.float32)
        s = nl.load(sin[nl.ds(s0, ssz), :], dtype=nl.float32)
        for n in nl.affine_range(N):
            t = nl.load(x[n, nl.ds(s0, ssz), :])
            x1, x2 = t[:, first], t[:, second]
            o = nl.ndarray((ssz, D), x.dtype)
            _rotate_into(o[:, first], x1, c, x2, s, combine_first)
            _rotate_into(o[:, second], x2, c, x1, s, combine_second)
            nl.store(out[n, nl.ds(s0, ssz), :], value=o)
    return out


def _rotate_into(dst: Any, a: Any, c: Any, b: Any, s: Any, combine: Any) -> None:
    """dst = combine(a * c, b * s) (three VectorE instructions, fp32)."""
    shape = (a.shape[0], a.shape[1])
    ac, bs = nl.ndarray(shape, nl.float32), nl.ndarray(shape, nl.float32)
    nisa.tensor_tensor(ac, a, c, nl.multiply)
    nisa.tensor_tensor(bs, b, s, nl.multiply)
    nisa.tensor_tensor(dst, ac, bs, combine)
