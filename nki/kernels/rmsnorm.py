"""RMSNorm: out = h / sqrt(mean(h^2, -1) + eps) * weight with h = x (+ residual), rows on
partitions; forward (saving 1/rms for the backward) and backward (dh, and dweight summed over
rows on TensorE)."""
from __future__ import annotations

from typing import Any

import nki
import nki.isa as nisa
import nki.language as nl

from ._tiles import P, bank_tiles, partition_sum, store_banks, tiles


def broadcast_row(vector: Any) -> Any:
    """A [D] HBM vector loaded once as fp32 and broadcast over the 128 partitions."""
    (d,) = vector.shape
    return nl.load(vector.reshape((1, d)), dtype=nl.float32).broadcast_to((P, d))


def load_rows(x: Any, residual: Any, h_out: Any, r0: int, rsz: int) -> Any:
    """Rows r0:r0+rsz of the normalised input: x, or x + residual (rounded to x's dtype as the
    unfused add would be, and stored to h_out for the next layer and the backward)."""
    t = nl.load(x[nl.ds(r0, rsz), :])
    if residual is None:
        return t
    h = nl.ndarray(t.shape, x.dtype)
    nisa.tensor_tensor(h, t, nl.load(residual[nl.ds(r0, rsz), :]), nl.add)
    nl.store(h_out[nl.ds(r0, rsz), :], value=h)
    return h


def inverse_rms(values: Any, eps: float) -> Any:
    """1 / sqrt(mean(values^2) + eps) per row ([p, 1] fp32): squares summed on ScalarE's
    reduction registers, then one rsqrt activation."""
    rows, d = values.shape
    squares = nl.ndarray((rows, d), nl.float32)
    total = nl.ndarray((rows, 1), nl.float32)
    nisa.activation_reduce(squares, nl.square, values, nl.add, total)
    rstd = nl.ndarray((rows, 1), nl.float32)
    nisa.activation(rstd, nl.rsqrt, total, bias=eps, scale=1.0 / d)
    return rstd


def store_normalized(out: Any, values: Any, rstd: Any, weight: Any, bias: Any, r0: int) -> None:
    """out[r0:r0+rows] = values * rstd * weight (+ bias), rounded to out's dtype."""
    rows, D = values.shape
    xhat = nl.ndarray((rows, D), nl.float32)
    nisa.tensor_scalar(xhat, values, nl.multiply, rstd)
    y = nl.ndarray((rows, D), out.dtype)
    scale_shift(y, xhat, weight, bias)
    nl.store(out[nl.ds(r0, rows), :], value=y)


def scale_shift(dst: Any, xhat: Any, weight: Any, bias: Any) -> None:
    """dst = xhat * weight (+ bias), weight / bias broadcast rows ([128, D] fp32)."""
    rows = xhat.shape[0]
    if bias is None:
        nisa.tensor_tensor(dst, xhat, weight[0:rows, :], nl.multiply)
        return
    scaled = nl.ndarray(xhat.shape, nl.float32)
    nisa.tensor_tensor(scaled, xhat, weight[0:rows, :], nl.multiply)
    nisa.tensor_tensor(dst, scaled, bias[0:rows, :], nl.add)


def store_input_grad(dh: Any, rows: Any, dres: Any, r0: int, rsz: int) -> None:
    """dh rows (fp32) + the gradient arriving at the residual-sum output, if any, into dh's dtype."""
    if dres is None:
        nl.store(dh[nl.ds(r0, rsz), :], value=rows)
        return
    total = nl.ndarray(rows.shape, dh.dtype)
    nisa.tensor_tensor(total, rows, nl.load(dres[nl.ds(r0, rsz), :]), nl.add)
    nl.store(dh[nl.ds(r0, rsz), :], value=total)


def normalize_rows(x: Any, weight: Any, residual: Any, eps: float, out: Any, h_out: Any, rstd_out: Any) -> None:
    """The forward over all row tiles; rstd_out (when given) receives 1/rms per row."""
    R, D = x.shape
    w = broadcast_row(weight)
    for r0, rsz in tiles(R):
        h = load_rows(x, residual, h_out, r0, rsz)
        rstd = inverse_rms(h, eps)
        store_normalized(out, h, rstd, w, None, r0)
        if rstd_out is not None:
            nl.store(rstd_out.reshape((R, 1))[nl.ds(r0, rsz), :], value=rstd)


@nki.jit
def rmsnorm(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """The forward alone: out [R, D] in x's dtype."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    normalize_rows(x, weight, None, eps, out, None, None)
    return out


@nki.jit
def rmsnorm_fwd(x: Any, weight: Any, residual: Any = None, eps: float = 1e-6) -> Any:
    """out = rmsnorm(h) with h = x (+ residual). Returns (out, rstd [R] fp32), or (out, h, rstd)
    with a residual."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    h_out = None if residual is None else nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rstd = nl.ndarray((x.shape[0],), dtype=nl.float32, buffer=nl.shared_hbm)
    normalize_rows(x, weight, residual, eps, out, h_out, rstd)
    return (out, rstd) if residual is None else (out, h_out, rstd)


@nki.jit
def rmsnorm_bwd(dy: Any, h: Any, weight: Any, rstd: Any, dres: Any = None) -> Any:
    """Gradients of rmsnorm_fwd: (dh [R, D] in h's dtype, dweight [D] fp32).

    dh = rstd * (g - xhat * mean(g * xhat)) with g = dy * weight, xhat = h * rstd, plus `dres`
    (the gradient of the residual sum h when it is also an output); dweight = sum_rows(dy * xhat)."""
    R, D = h.shape
    dh = nl.ndarray((R, D), dtype=h.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((D,), dtype=nl.float32, buffer=nl.shared_hbm)
    w = broadcast_row(weight)
    ones = nl.ones((P, 1), nl.float32)
    dw_acc = bank_tiles(1, D)
    for r0, rsz in tiles(R):
        dyt = nl.load(dy[nl.ds(r0, rsz), :])
        rs = nl.load(rstd.reshape((R, 1))[nl.ds(r0, rsz), :])
        xhat = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(xhat, nl.load(h[nl.ds(r0, rsz), :]), nl.multiply, rs)
        g = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(g, dyt, w[0:rsz, :], nl.multiply)
        gx = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(gx, g, xhat, nl.multiply)
        gx_sum = nl.ndarray((rsz, 1), nl.float32)
        nisa.tensor_reduce(gx_sum, nl.add, gx, axis=1, keepdims=True)
        proj = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_scalar(proj, xhat, nl.multiply, gx_sum, op1=nl.multiply, operand1=1.0 / D)
        rows = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(rows, g, proj, nl.subtract)
        nisa.tensor_scalar(rows, rows, nl.multiply, rs)
        store_input_grad(dh, rows, dres, r0, rsz)
        dw_rows = nl.ndarray((rsz, D), nl.float32)
        nisa.tensor_tensor(dw_rows, dyt, xhat, nl.multiply)
        partition_sum(dw_acc, dw_rows, ones, accumulate=r0 > 0)
    store_banks(dw.reshape((1, D)), dw_acc)
    return dh, dw
