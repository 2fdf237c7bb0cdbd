"""Top-k along the free axis of x [R, C] (rows on partitions): values in descending order and
their column indices."""
from __future__ import annotations

from typing import Any

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, tiles


def column_index(cols: int) -> Any:
    """[128, cols] fp32 tile holding each element's column index (GpSimd iota, made once)."""
    index = nl.ndarray((P, cols), nl.float32)
    nisa.iota(index, nl.arange(P)[:, None] * 0 + nl.arange(cols)[None, :])
    return index


def top_k_rows(values: Any, k: int, index: Any) -> tuple[Any, Any]:
    """The k largest of each row of `values` ([p, C] fp32, consumed) and their columns, as two
    [p, k] fp32 tiles; ties go to the lowest column.

    k rounds on VectorE: the row maximum, its first column (the minimum column where the row
    equals it), then that element is replaced by -inf."""
    rows, cols = values.shape
    index = index[0:rows, :]
    top, where = nl.ndarray((rows, k), nl.float32), nl.ndarray((rows, k), nl.float32)
    remaining = values
    for j in range(k):
        nisa.tensor_reduce(top[:, j:j + 1], nl.maximum, remaining, axis=1, keepdims=True)
        is_max = nl.ndarray((rows, cols), nl.float32)
        nisa.tensor_scalar(is_max, remaining, nl.equal, top[:, j:j + 1])
        # columns of the maxima, the others pushed past the last column
        candidates = nl.where(is_max, index, float(cols), dtype=nl.float32)
        nisa.tensor_reduce(where[:, j:j + 1], nl.minimum, candidates, axis=1, keepdims=True)
        if j + 1 < k:
            taken = nl.ndarray((rows, cols), nl.float32)
            nisa.tensor_scalar(taken, index, nl.equal, where[:, j:j + 1])
            remaining = nl.where(taken, -np.inf, remaining, dtype=nl.float32)
    return top, where


def top_k_rows_max8(values: Any, k: int) -> tuple[Any, Any]:
    """The k largest of each row of `values` ([p, C >= 8] fp32) and their columns: ceil(k / 8) rounds
    of VectorE max8 (8 largest, descending) and nc_match_replace8 (their positions, each replaced by
    -inf for the next round; equal values take successive occurrences, so ties go to the lowest
    column first)."""
    rows, cols = values.shape
    rounds = -(-k // 8)
    top, where = nl.ndarray((rows, 8 * rounds), nl.float32), nl.ndarray((rows, 8 * rounds), nl.uint32)
    remaining = nl.copy(values, dtype=nl.float32)
    for j in range(rounds):
        nisa.max8(dst=top[:, 8 * j:8 * j + 8], src=remaining)
        nisa.nc_match_replace8(dst=remaining, data=remaining, vals=top[:, 8 * j:8 * j + 8], imm=-np.inf,
                               dst_idx=where[:, 8 * j:8 * j + 8])
    return top[:, 0:k], where[:, 0:k]


@nki.jit
def topk(x: Any, k: int) -> Any:
    """(values [R, k] in x's dtype, indices [R, k] int32) of the k largest of each row."""
    R, C = x.shape
    assert 1 <= k <= C, f"k={k} must be in 1..{C}"
    values = nl.ndarray((R, k), dtype=x.dtype, buffer=nl.shared_hbm)
    indices = nl.ndarray((R, k), dtype=nl.int32, buffer=nl.shared_hbm)
    index = column_index(C) if C < 8 else None
    for r0, rsz in tiles(R):
        rows = nl.load(x[nl.ds(r0, rsz), :], dtype=nl.float32)
        top, where = top_k_rows(rows, k, index) if C < 8 else top_k_rows_max8(rows, k)
        nl.store(values[nl.ds(r0, rsz), :], value=top)
        nl.store(indices[nl.ds(r0, rsz), :], value=where)
    return values, indices
