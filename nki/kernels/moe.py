"""Mixture-of-experts kernels: the router's top-k and the blockwise expert matmul."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import BANK, P, project, psum_tile, tiles, transposed_blocks
from .topk import column_index, top_k_rows


@nki.jit
def router_topk(logits: Any, k: int, normalize: bool = True) -> Any:
    """Route each token (row of logits [T, E]) to its k most probable experts: softmax over the
    experts, top-k, and with `normalize` the k probabilities divided by their sum (Mixtral;
    Qwen-MoE's norm_topk_prob). Returns (weights [T, k] fp32, experts [T, k] int32)."""
    T, E = logits.shape
    assert 1 <= k <= E, f"k={k} must be in 1..{E}"
    weights = nl.ndarray((T, k), dtype=nl.float32, buffer=nl.shared_hbm)
    experts = nl.ndarray((T, k), dtype=nl.int32, buffer=nl.shared_hbm)
    index = column_index(E)
    for r0, rsz in tiles(T):
        t = nl.load(logits[nl.ds(r0, rsz), :])
        neg_max = nl.ndarray((rsz, 1), nl.float32)
        nisa.tensor_reduce(neg_max, nl.maximum, t, axis=1, keepdims=True, negate=True)
        e = nl.ndarray((rsz, E), nl.float32)
        total = nl.ndarray((rsz, 1), nl.float32)
        nisa.activation_reduce(e, nl.exp, t, nl.add, total, bias=neg_max)
        # the top-k of exp(x - max) are those of the probabilities: normalise only k columns
        top, where = top_k_rows(e, k, index)
        if normalize:
            nisa.tensor_reduce(total, nl.add, top, axis=1, keepdims=True)
        nisa.tensor_scalar(top, top, nl.divide, total)
        nl.store(weights[nl.ds(r0, rsz), :], value=top)
        nl.store(experts[nl.ds(r0, rsz), :], value=where)
    return weights, experts


@nki.jit
def blockwise_expert_matmul(x: Any, w: Any, block_expert: Sequence[int]) -> Any:
    """out[b-th block of 128 rows] = x[block] @ w[block_expert[b]] for x [T, H] whose tokens are
    grouped by expert in blocks of 128 rows (T = 128 x len(block_expert); padding rows are
    computed like the others), w [E, H, N]. Returns out [T, N] in x's dtype.

    `block_expert` is a host-side sequence of ints: the simulator has no dynamic (register-valued)
    DMA addressing, so the kernel is specialised to the routing, as a kernel traced for it would be."""
    T, H = x.shape
    E, H2, N = w.shape
    assert H == H2 and T == P * len(block_expert), "x must be [128 x blocks, H] and w [E, H, N]"
    out = nl.ndarray((T, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for b, expert in enumerate(block_expert):
        assert 0 <= expert < E, f"block {b}: expert {expert} is not in 0..{E - 1}"
        x_t = transposed_blocks(nl.load(x[nl.ds(b * P, P), :]))            # [h, 128] per 128 of H
        for n0, nsz in tiles(N, BANK):
            acc = project(psum_tile(P, nsz), x_t, w.reshape((E * H, N)), n0, row0=expert * H)
            nl.store(out[nl.ds(b * P, P), nl.ds(n0, nsz)], value=nl.copy(acc, dtype=x.dtype))
    return out
