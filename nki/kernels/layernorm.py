"""LayerNorm: out = (h - mean) / sqrt(var + eps) * weight (+ bias) with h = x (+ residual), rows on
partitions; forward (saving mean and 1/std) and backward (dh, dweight, dbias)."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, bank_tiles, partition_sum, store_banks, tiles
from .rmsnorm import broadcast_row, inverse_rms, load_rows, store_input_grad, store_normalized


def _row_mean(values: Any) -> Any:
    """mean along the free axis ([p, 1] fp32)."""
    rows, d = values.shape
    total = nl.ndarray((rows, 1), nl.float32)
    nisa.tensor_reduce(total, nl.add, values, axis=1, keepdims=True)
    nisa.tensor_scalar(total, total, nl.multiply, 1.0 / d)
    return total


@nki.jit
def layernorm_fwd(x: Any, weight: Any, bias: Any = None, residual: Any = None, eps: float = 1e-5) -> Any:
    """out = layernorm(h) with h = x (+ residual). Returns (out, mean [R], rstd [R]) (fp32
    statistics), or (out, h, mean, rstd) with a residual. The variance is taken of the centred
    rows (two passes over the tile, as exact as torch's)."""
    R, D = x.shape
    out = nl.ndarray((R, D), dtype=x.dtype, buffer=nl.shared_hbm)
    h_out = None if residual is None else nl.ndarray((R, D), dtype=x.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((R,), dtype=nl.float32, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((R,), dtype=nl.float32, buffer=nl.shared_hbm)
    w = broadcast_row(weight)
    b = None if bias is None else broadcast_row(bias)
    for r0, rsz in tiles(R):
        h = load_rows(x, residual, h_out, r0, rsz)
        mean = _row_mean(h)
        centred = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(centred, h, nl.subtract, mean)
        rstd = inverse_rms(centred, eps)
        store_normalized(out, centred, rstd, w, b, r0)
        nl.store(mean_out.reshape((R, 1))[nl.ds(r0, rsz), :], value=mean)
        nl.store(rstd_out.reshape((R, 1))[nl.ds(r0, rsz), :], value=rstd)
    return (out, mean_out, rstd_out) if residual is None else (out, h_out, mean_out, rstd_out)


@nki.jit
def layernorm_bwd(dy: Any, h: Any, weight: Any, mean: Any, rstd: Any, dres: Any = None) -> Any:
    """Gradients of layernorm_fwd: (dh [R, D] in h's dtype, dweight [D] fp32, dbias [D] fp32).

    dh = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight and
    xhat = (h - mean) * rstd, plus `dres`; dweight = sum_rows(dy * xhat), dbias = sum_rows(dy)."""
    R, D = h.shape
    dh = nl.ndarray((R, D), dtype=h.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((D,), dtype=nl.float32, buffer=nl.shared_hbm)
    db = nl.ndarray((D,), dtype=nl.float32, buffer=nl.shared_hbm)
    w = broadcast_row(weight)
    ones = nl.ones((P, 1), nl.float32)
    dw_acc, db_acc = bank_tiles(1, D), bank_tiles(1, D)
    for r0, rsz in tiles(R):
        dyt = nl.load(dy[nl.ds(r0, rsz), :])
        rs = nl.load(rstd.reshape((R, 1))[nl.ds(r0, rsz), :])
        mu = nl.load(mean.reshape((R, 1))[nl.ds(r0, rsz), :])
        xhat = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(xhat, nl.load(h[nl.ds(r0, rsz), :]), nl.subtract, mu, op1=nl.multiply, operand1=rs)
        g = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(g, dyt, w[0:rsz, :], nl.multiply)
        g_mean = _row_mean(g)
        gx = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(gx, g, xhat, nl.multiply)
        proj = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(proj, xhat, nl.multiply, _row_mean(gx))
        rows = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(rows, g, proj, nl.subtract)
        nisa.tensor_scalar(rows, rows, nl.subtract, g_mean, op1=nl.multiply, operand1=rs)
        store_input_grad(dh, rows, dres, r0, rsz)
        dw_rows = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(dw_rows, dyt, xhat, nl.multiply)
        partition_sum(dw_acc, dw_rows, ones, accumulate=r0 > 0)
        partition_sum(db_acc, dyt, ones, accumulate=r0 > 0)
    store_banks(dw.reshape((1, D)), dw_acc)
    store_banks(db.reshape((1, D)), db_acc)
    return dh, dw, db
