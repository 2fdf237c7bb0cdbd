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
    # Tiles allocated once and reused by every row tile (views of their first rsz partitions).
    neg_max, total = nl.ndarray((P, 1), nl.float32), nl.ndarray((P, 1), nl.float32)
    e, y = nl.ndarray((P, C), nl.float32), nl.ndarray((P, C), x.dtype)
    for r in nl.affine_range((R + P - 1) // P):
        r0, rsz = r * P, min(P, R - r * P)
        t = nl.load(x[nl.ds(r0, rsz), :])
        nisa.tensor_reduce(neg_max[:rsz], nl.maximum, t, axis=1, keepdims=True, negate=True)
        # exp(x - max) on ScalarE, its row sum in the same instruction
        nisa.activation(e[:rsz], nl.exp, t, bias=neg_max[:rsz], reduce_op=nl.add, reduce_res=total[:rsz],
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.tensor_scalar(y[:rsz], e[:rsz], nl.multiply, nl.reciprocal(total[:rsz]))
        nl.store(out[nl.ds(r0, rsz), :], value=y[:rsz])
    return out
