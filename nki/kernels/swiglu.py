"""SwiGLU MLP: y = (silu(x @ w_gate) * (x @ w_up)) @ w_down, tokens on partitions, forward and
backward (the gate and up projections are recomputed, only x is saved)."""
from __future__ import annotations

from typing import Any

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


def _check(x: Any, w_gate: Any, w_up: Any, w_down: Any) -> tuple[int, int, int]:
    T, H = x.shape
    F = w_gate.shape[1]
    assert w_gate.shape == (H, F) and w_up.shape == (H, F) and w_down.shape == (F, H), \
        "need x [T, H], w_gate / w_up [H, F], w_down [F, H]"
    return T, H, F


def _gate_up(x_t: list[Any], w_gate: Any, w_up: Any, i0: int, isz: int) -> tuple[Any, Any]:
    """The gate and up projections of a token tile, columns i0:i0+isz ([t, isz] PSUM fp32)."""
    rows = x_t[0].shape[1]
    return (project(psum_tile(rows, isz), x_t, w_gate, i0), project(psum_tile(rows, isz), x_t, w_up, i0))


@nki.jit
def swiglu_fwd(x: Any, w_gate: Any, w_up: Any, w_down: Any) -> Any:
    """y [T, H] in x's dtype for x [T, H], w_gate / w_up [H, F], w_down [F, H] (F: the intermediate
    size; weights stored input-major, y = x @ w: the transposes of torch Linear weights)."""
    T, H, F = _check(x, w_gate, w_up, w_down)
    out = nl.ndarray((T, H), dtype=x.dtype, buffer=nl.shared_hbm)
    for t0, tsz in tiles(T):
        x_t = transposed_blocks(nl.load(x[nl.ds(t0, tsz), :]))
        a = nl.ndarray((tsz, F), x.dtype)
        for i0, isz in tiles(F, BANK):
            g, u = _gate_up(x_t, w_gate, w_up, i0, isz)
            silu = nl.ndarray((tsz, isz), nl.float32)
            nisa.activation(silu, nl.silu, g)
            nisa.tensor_tensor(a[:, i0:i0 + isz], silu, u, nl.multiply)
        a_t = transposed_blocks(a)
        y = [project(bank, a_t, w_down, n0) for bank, (n0, _) in zip(bank_tiles(tsz, H), tiles(H, BANK))]
        store_banks(out, y, t0)
    return out


def _swiglu_grads(a: Any, dg: Any, du: Any, g: Any, u: Any, da: Any) -> None:
    """a = silu(g) u, du = da silu(g), dg = da u silu'(g) with silu'(g) = sig (1 + g (1 - sig))."""
    shape = tuple(g.shape)
    sig, silu, t = (nl.ndarray(shape, nl.float32) for _ in range(3))
    nisa.activation(sig, nl.sigmoid, g)
    nisa.tensor_tensor(silu, g, sig, nl.multiply)
    nisa.tensor_tensor(a, silu, u, nl.multiply)
    nisa.tensor_tensor(du, da, silu, nl.multiply)
    nisa.tensor_scalar(t, sig, nl.multiply, -1.0, op1=nl.add, operand1=1.0)   # 1 - sig
    nisa.tensor_tensor(t, g, t, nl.multiply)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.tensor_tensor(t, t, sig, nl.multiply)                                # silu'(g)
    nisa.tensor_tensor(silu, da, u, nl.multiply)                              # (reuses the tile)
    nisa.tensor_tensor(dg, silu, t, nl.multiply)


@nki.jit
def swiglu_bwd(dy: Any, x: Any, w_gate: Any, w_up: Any, w_down: Any) -> Any:
    """Gradients of swiglu_fwd: (dx [T, H] in x's dtype, dw_gate [H, F], dw_up [H, F],
    dw_down [F, H] fp32). The weight gradients of each token tile are added in HBM."""
    T, H, F = _check(x, w_gate, w_up, w_down)
    dx = nl.ndarray((T, H), dtype=x.dtype, buffer=nl.shared_hbm)
    dw_gate, dw_up = (nl.ndarray((H, F), dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(2))
    dw_down = nl.ndarray((F, H), dtype=nl.float32, buffer=nl.shared_hbm)
    # contractions over F (dx) and over H (the gradient at a) need the weights transposed
    w_gate_t, w_up_t, w_down_t = (transpose_to_hbm(w) for w in (w_gate, w_up, w_down))
    for t0, tsz in tiles(T):
        xr, dyr = nl.load(x[nl.ds(t0, tsz), :]), nl.load(dy[nl.ds(t0, tsz), :])
        x_t, dy_t = transposed_blocks(xr), transposed_blocks(dyr)
        a, dg, du = (nl.ndarray((tsz, F), x.dtype) for _ in range(3))
        for i0, isz in tiles(F, BANK):
            g, u = _gate_up(x_t, w_gate, w_up, i0, isz)
            da = project(psum_tile(tsz, isz), dy_t, w_down_t, i0)
            cols = slice(i0, i0 + isz)
            _swiglu_grads(a[:, cols], dg[:, cols], du[:, cols], g, u, da)
        accumulate_product(dw_gate, xr, dg, t0 == 0)
        accumulate_product(dw_up, xr, du, t0 == 0)
        accumulate_product(dw_down, a, dyr, t0 == 0)
        dg_t, du_t = transposed_blocks(dg), transposed_blocks(du)
        banks = bank_tiles(tsz, H)
        for bank, (n0, _) in zip(banks, tiles(H, BANK)):
            project(bank, dg_t, w_gate_t, n0)
            project(bank, du_t, w_up_t, n0, fresh=False)
        store_banks(dx, banks, t0)
    return dx, dw_gate, dw_up, dw_down
