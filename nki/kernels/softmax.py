"""Row softmax: each row of x [R, C] normalised along the free axis, 128 rows per tile."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax(x: Any) -> Any:
    R, C = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range((R + P - 1) // P):
        r0, rsz = r * P, min(P, R - r * P)
        t = nl.load(x[nl.ds(r0, rsz), :])
        neg_max = nl.ndarray((rsz, 1), nl.float32)
        nisa.tensor_reduce(neg_max, nl.maximum, t, axis=1, keepdims=True, negate=True)
        e = nl.ndarray((rsz, C), nl.float32)
        total = nl.ndarray((rsz, 1), nl.float32)
        # exp(x - max) on ScalarE, its row sum in the same instruction
        nisa.activation(e, nl.exp, t, bias=neg_max, reduce_op=nl.add, reduce_res=total,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        y = nl.ndarray((rsz, C), x.dtype)
        nisa.tensor_scalar(y, e, nl.multiply, nl.reciprocal(total))
        nl.store(out[nl.ds(r0, rsz), :], value=y)
    return out
