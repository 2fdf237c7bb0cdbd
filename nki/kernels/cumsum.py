"""Cumulative sum along the free axis of x [R, C] (rows on partitions)."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, tiles


@nki.jit
def cumsum(x: Any, reverse: bool = False) -> Any:
    """out[:, j] = sum(x[:, :j+1]) (or sum(x[:, j:]) with `reverse`, the cumsum's backward), in
    x's dtype, accumulated in fp32.

    One VectorE `tensor_tensor_scan` per row tile: r[j] = 1 * r[j-1] + x[j]. The suffix sums of
    `reverse` are total - (prefix - x): the scan, the row total and two elementwise instructions."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.ones((P, C), nl.float32)
    for r0, rsz in tiles(R):
        rows = nl.load(x[nl.ds(r0, rsz), :], dtype=nl.float32)
        acc = nl.ndarray((rsz, C), nl.float32)
        nisa.tensor_tensor_scan(dst=acc, data0=ones[0:rsz, :], data1=rows, initial=0.0, op0=nl.multiply,
                                op1=nl.add)
        if reverse:
            total = nl.ndarray((rsz, 1), nl.float32)
            nisa.tensor_reduce(dst=total, op=nl.add, data=rows, axis=1, keepdims=True)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=rows, op=nl.subtract)      # sum(x[:, :j])
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.subtract, operand0=total, reverse0=True)
        nl.store(out[nl.ds(r0, rsz), :], value=acc)
    return out
