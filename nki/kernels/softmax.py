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
        neg_max = nisa.tensor_reduce(nl.maximum, t, axis=1, keepdims=True, negate=True,
                                     dtype=nl.float32)
        e = nisa.activation(nl.exp, t, bias=neg_max, dtype=nl.float32)   # exp(x - max)
        total = nisa.tensor_reduce(nl.add, e, axis=1, keepdims=True)
        inv = nl.reciprocal(total)
        nl.store(out[nl.ds(r0, rsz), :], value=nisa.tensor_scalar(e, nl.multiply, inv,
                                                                   dtype=x.dtype))
    return out
