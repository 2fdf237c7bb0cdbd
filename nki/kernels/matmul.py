"""Tiled matmul: out[M, N] = a[M, K] @ b[K, N] for any M, N, K, with K accumulated in PSUM."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul(a: Any, b: Any) -> Any:
    M, K = a.shape
    K2, N = b.shape
    assert K == K2, f"inner dimensions differ: {K} vs {K2}"
    TM = nl.tile_size.gemm_stationary_fmax   # 128 output rows per tile
    TK = nl.tile_size.pmax                   # 128 contraction rows per matmul
    TN = nl.tile_size.gemm_moving_fmax       # 512 output columns (one fp32 PSUM bank)
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range((M + TM - 1) // TM):
        m0, msz = m * TM, min(TM, M - m * TM)
        # Stationary operands are a^T tiles [k, m]: transpose each a tile once on TensorE and
        # keep it in SBUF for every N tile.
        a_t = []
        for k in nl.affine_range((K + TK - 1) // TK):
            k0, ksz = k * TK, min(TK, K - k * TK)
            a_tile = nl.load(a[nl.ds(m0, msz), nl.ds(k0, ksz)])
            a_t_psum = nl.ndarray((ksz, msz), a.dtype, buffer=nl.psum)
            nisa.nc_transpose(a_t_psum, a_tile)
            a_t.append(nl.copy(a_t_psum, dtype=a.dtype))
        for n in nl.affine_range((N + TN - 1) // TN):
            n0, nsz = n * TN, min(TN, N - n * TN)
            acc = nl.ndarray((msz, nsz), nl.float32, buffer=nl.psum)
            for k in nl.sequential_range(len(a_t)):
                k0, ksz = k * TK, min(TK, K - k * TK)
                b_tile = nl.load(b[nl.ds(k0, ksz), nl.ds(n0, nsz)])
                nisa.nc_matmul(acc, a_t[k], b_tile, accumulate=k > 0)
            nl.store(out[nl.ds(m0, msz), nl.ds(n0, nsz)], value=nl.copy(acc, dtype=a.dtype))
    return out
