"""RMSNorm: out = x / sqrt(mean(x^2, -1) + eps) * weight, rows on partitions."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def rmsnorm(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    R, D = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, D), dtype=x.dtype, buffer=nl.shared_hbm)
    # One weight row, broadcast over the partitions once and reused by every row tile.
    w = nl.load(weight.reshape((1, D)), dtype=nl.float32).broadcast_to((P, D))
    for r in nl.affine_range((R + P - 1) // P):
        r0, rsz = r * P, min(P, R - r * P)
        t = nl.load(x[nl.ds(r0, rsz), :])
        mean_sq = nl.mean(nl.square(t, dtype=nl.float32), axis=1, keepdims=True)
        inv_rms = nl.ndarray((rsz, 1), nl.float32)
        nisa.activation(inv_rms, nl.rsqrt, mean_sq, bias=eps)            # 1/sqrt(ms + eps)
        y = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(y, t, nl.multiply, inv_rms)
        nl.store(out[nl.ds(r0, rsz), :], value=nl.multiply(y, w[0:rsz, :], dtype=x.dtype))
    return out
