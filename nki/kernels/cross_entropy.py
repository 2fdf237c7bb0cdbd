"""Fused linear + cross-entropy: loss_t = logsumexp(h_t @ w^T) - (h_t @ w^T)[label_t] for hidden
states h [T, H] and an output embedding w [V, H], tokens on partitions, the vocabulary streamed
in chunks of 512 with an online logsumexp: the [T, V] logits are never stored."""
from __future__ import annotations

from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import (
    BANK,
    accumulate_product,
    bank_tiles,
    project,
    psum_tile,
    store_banks,
    tiles,
    transpose_to_hbm,
    transposed_blocks,
)
from .topk import column_index


def _check(h: Any, w: Any, labels: Any) -> tuple[int, int, int]:
    T, H = h.shape
    V = w.shape[0]
    assert w.shape == (V, H) and labels.shape == (T,), "need h [T, H], w [V, H], labels [T]"
    return T, H, V


def _column(vector: Any, t0: int, tsz: int) -> Any:
    """Rows t0:t0+tsz of a [T] HBM vector as a [tsz, 1] fp32 tile."""
    return nl.load(vector.reshape((vector.shape[0], 1))[nl.ds(t0, tsz), :], dtype=nl.float32)


def _one_hot(label: Any, index: Any, v0: int, vsz: int) -> Any:
    """[t, vsz] fp32: 1 where column v0 + j is the row's label (ignored labels match nothing)."""
    rows = label.shape[0]
    shifted = nl.ndarray((rows, 1), nl.float32)
    nisa.tensor_scalar(shifted, label, nl.subtract, float(v0))
    hot = nl.ndarray((rows, vsz), nl.float32)
    nisa.tensor_scalar(hot, index[0:rows, 0:vsz], nl.equal, shifted)
    return hot


def _row_dot(a: Any, b: Any) -> Any:
    """sum(a * b) along the free axis ([t, 1] fp32)."""
    product = nl.ndarray(a.shape, nl.float32)
    nisa.tensor_tensor(product, a, b, nl.multiply)
    total = nl.ndarray((a.shape[0], 1), nl.float32)
    nisa.tensor_reduce(total, nl.add, product, axis=1, keepdims=True)
    return total


def _online_logsumexp(logits: Any, run_max: Any, run_sum: Any) -> tuple[Any, Any]:
    """The running (max, sum of exp(x - max)) of each row after one more chunk of logits."""
    rows = logits.shape[0]
    new_max, neg_max, rescale, chunk_sum = (nl.ndarray((rows, 1), nl.float32) for _ in range(4))
    nisa.tensor_reduce(new_max, nl.maximum, logits, axis=1, keepdims=True)
    nisa.tensor_tensor(new_max, new_max, run_max, nl.maximum)
    nisa.tensor_scalar(neg_max, new_max, nl.multiply, -1.0)
    exps = nl.ndarray(logits.shape, nl.float32)
    nisa.activation_reduce(exps, nl.exp, logits, nl.add, chunk_sum, bias=neg_max)
    nisa.activation(rescale, nl.exp, run_max, bias=neg_max)       # exp(old max - new max)
    new_sum = nl.ndarray((rows, 1), nl.float32)
    nisa.tensor_scalar(new_sum, run_sum, nl.multiply, rescale)
    nisa.tensor_tensor(new_sum, new_sum, chunk_sum, nl.add)
    return new_max, new_sum


@nki.jit
def linear_cross_entropy_fwd(h: Any, w: Any, labels: Any, ignore_index: int = -100) -> Any:
    """(loss [T], lse [T]) fp32 per token for labels [T] int32; tokens labelled `ignore_index`
    have loss 0. The mean over the other tokens is left to the caller."""
    T, H, V = _check(h, w, labels)
    loss = nl.ndarray((T,), dtype=nl.float32, buffer=nl.shared_hbm)
    lse = nl.ndarray((T,), dtype=nl.float32, buffer=nl.shared_hbm)
    w_t = transpose_to_hbm(w)                  # [H, V]: the contraction over H on partitions
    index = column_index(BANK)
    for t0, tsz in tiles(T):
        h_t = transposed_blocks(nl.load(h[nl.ds(t0, tsz), :]))
        label = _column(labels, t0, tsz)
        run_max = nl.full((tsz, 1), -np.inf, nl.float32)
        run_sum, target = nl.zeros((tsz, 1), nl.float32), nl.zeros((tsz, 1), nl.float32)
        for v0, vsz in tiles(V, BANK):
            logits = project(psum_tile(tsz, vsz), h_t, w_t, v0)
            run_max, run_sum = _online_logsumexp(logits, run_max, run_sum)
            nisa.tensor_tensor(target, target, _row_dot(logits, _one_hot(label, index, v0, vsz)), nl.add)
        row_lse = nl.ndarray((tsz, 1), nl.float32)
        nisa.activation(row_lse, nl.log, run_sum)
        nisa.tensor_tensor(row_lse, row_lse, run_max, nl.add)
        valid = nl.ndarray((tsz, 1), nl.float32)
        nisa.tensor_scalar(valid, label, nl.not_equal, float(ignore_index))
        row_loss = nl.ndarray((tsz, 1), nl.float32)
        nisa.tensor_tensor(row_loss, row_lse, target, nl.subtract)
        nisa.tensor_tensor(row_loss, row_loss, valid, nl.multiply)
        nl.store(loss.reshape((T, 1))[nl.ds(t0, tsz), :], value=row_loss)
        nl.store(lse.reshape((T, 1))[nl.ds(t0, tsz), :], value=row_lse)
    return loss, lse


@nki.jit
def linear_cross_entropy_bwd(dloss: Any, h: Any, w: Any, labels: Any, lse: Any, ignore_index: int = -100) -> Any:
    """Gradients of linear_cross_entropy_fwd for the per-token loss gradient dloss [T] fp32:
    (dh [T, H] in h's dtype, dw [V, H] fp32). dlogits = (softmax - onehot) * dloss (0 on ignored
    tokens), recomputed chunk by chunk from the saved logsumexp."""
    T, H, V = _check(h, w, labels)
    dh = nl.ndarray((T, H), dtype=h.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((V, H), dtype=nl.float32, buffer=nl.shared_hbm)
    w_t = transpose_to_hbm(w)
    index = column_index(BANK)
    for t0, tsz in tiles(T):
        hr = nl.load(h[nl.ds(t0, tsz), :])
        h_t = transposed_blocks(hr)
        label = _column(labels, t0, tsz)
        neg_lse, scale = nl.ndarray((tsz, 1), nl.float32), nl.ndarray((tsz, 1), nl.float32)
        nisa.tensor_scalar(neg_lse, _column(lse, t0, tsz), nl.multiply, -1.0)
        nisa.tensor_scalar(scale, label, nl.not_equal, float(ignore_index))
        nisa.tensor_tensor(scale, scale, _column(dloss, t0, tsz), nl.multiply)
        banks = bank_tiles(tsz, H)
        for v0, vsz in tiles(V, BANK):
            probs = nl.ndarray((tsz, vsz), nl.float32)
            nisa.activation(probs, nl.exp, project(psum_tile(tsz, vsz), h_t, w_t, v0), bias=neg_lse)
            nisa.tensor_tensor(probs, probs, _one_hot(label, index, v0, vsz), nl.subtract)
            dlogits = nl.ndarray((tsz, vsz), h.dtype)
            nisa.tensor_scalar(dlogits, probs, nl.multiply, scale)
            accumulate_product(dw, dlogits, hr, t0 == 0, row0=v0)
            dlogits_t = transposed_blocks(dlogits)
            for bank, (n0, _) in zip(banks, tiles(H, BANK)):
                project(bank, dlogits_t, w, n0, row0=v0, fresh=v0 == 0)
        store_banks(dh, banks, t0)
    return dh, dw
