"""Semantics of tensor indexing: ap(scalar_offset) addressing, chained views of HBM tensors, the tile
shape of index-expression accesses (one axis per index variable used), partition-aligned tile
assignment, and legacy mask= on compute instructions with ragged tails."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa
from helpers_nki import expect_rule

F32 = np.float32


def rand(*shape, dtype=F32):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("slot", [0, 3, 7])
def test_ap_scalar_offset_selects_an_index_of_the_tensor_dimension(slot):
    src = rand(4, 16)

    @nki.jit
    def k(src, out):
        t = nl.ndarray((4, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src)
        # indirect_dim 0 of the (8, 4, 16) tensor: slot `slot` (stride 64), not the pattern's row stride 16
        nisa.dma_copy(dst=out.ap([[16, 4], [1, 16]], offset=0, scalar_offset=slot, indirect_dim=0), src=t)
        return out
    out = nki.simulate(k)(src, np.zeros((8, 4, 16), F32))
    ref = np.zeros((8, 4, 16), F32)
    ref[slot] = src
    np.testing.assert_array_equal(out, ref)


def test_ap_scalar_offset_on_a_free_dimension_and_default_pattern():
    x = rand(4, 8)

    @nki.jit
    def k(x, out, copy):
        col = nl.ndarray((4, 1), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col, src=x.ap([[8, 4], [1, 1]], scalar_offset=5, indirect_dim=1))
        nisa.dma_copy(dst=out, src=col)
        whole = nl.ndarray((4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=whole, src=x.ap())  # no pattern: the tensor's own
        nisa.dma_copy(dst=copy, src=whole)
        return out, copy
    out, copy = nki.simulate(k)(x, np.zeros((4, 1), F32), np.zeros_like(x))
    np.testing.assert_array_equal(out, x[:, 5:6])
    np.testing.assert_array_equal(copy, x)


@pytest.mark.parametrize("dtype", [F32, ml_dtypes.bfloat16, np.int32])
def test_chained_indexing_of_hbm_views(dtype):
    x = rand(2, 3, 256, 8).astype(dtype)

    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(8)[None, :]
        view = x[1, 2]                       # (256, 8) view, indexed again
        assert view.shape == (256, 8)
        for s in nl.affine_range(2):
            t = nl.load(view[s * 128 + i_p, i_f])
            nl.store(out[1][s * 128 + i_p, i_f], value=t)
        nl.store(out[0][0:4, 0:8], value=nl.load(x[0][1][0:4, 0:8]))
        return out
    out = nki.simulate(k)(x, np.zeros((2, 256, 8), dtype))
    np.testing.assert_array_equal(out[1], x[1, 2])
    np.testing.assert_array_equal(out[0, 0:4], x[0, 1, 0:4])


def test_grid_access_has_one_axis_per_variable_used():
    a = rand(128, 40)
    g = rand(40)

    @nki.jit
    def k(a, g, out):
        ix, iw, iy = nl.mgrid[0:128, 0:1, 0:40]
        t = nl.load(a[ix, iy])
        assert t.shape == (128, 40)
        i_p, i_f, i_p_param = nl.mgrid[0:128, 0:40, 0:1]
        row = nl.load(g.reshape((1, 40))[i_p_param, i_f])
        assert row.shape == (1, 40)
        j_p, j_one = nl.mgrid[0:128, 0:1]
        col = nl.load(a[j_p, j_one + 3])
        assert col.shape == (128, 1)           # a used variable of extent 1 stays an axis
        total = nl.sum(t, axis=[1])             # the 40 columns, as in the rmsnorm tutorial
        nl.store(out[ix, iy], value=t * row.broadcast_to((128, 40)) + total + col)
        return out
    out = nki.simulate(k)(a, g, np.zeros_like(a))
    np.testing.assert_allclose(out, a * g + a.sum(1, keepdims=True) + a[:, 3:4], rtol=1e-5, atol=1e-5)


def test_free_axes_of_several_indices_follow_grid_order():
    # the partition variable first, then the other variables in grid order, whichever index uses
    # them: t[p, 2 * k + y, 2 * x + z] is (p, x, y, z) (a strided window gather)
    H, W = 7, 8
    x = rand(16, H, W)

    @nki.jit
    def k(x, out):
        i_p, i_x, i_y, i_z = nl.mgrid[0:16, 0:4, 0:3, 0:2]
        t = nl.load(x)
        window = nl.copy(t[i_p, 1 + i_y, 2 * i_x + i_z])
        assert window.shape == (16, 4, 3, 2)
        nl.store(out, value=window)
        return out
    out = nki.simulate(k)(x, np.zeros((16, 4, 3, 2), F32))
    ix, iy, iz = np.ogrid[0:4, 0:3, 0:2]
    np.testing.assert_array_equal(out, x[:, 1 + iy, 2 * ix + iz])


def test_expression_of_two_variables_keeps_grid_order():
    x = rand(16, 6 * 4)

    @nki.jit
    def k(x, out):
        i_p, i_a, i_b = nl.mgrid[0:16, 0:6, 0:4]
        t = nl.load(x[i_p, i_b * 6 + i_a])      # both variables: axes (a, b) in grid order
        assert t.shape == (16, 6, 4)
        tile = nl.ndarray((16, 6 * 4), nl.float32, buffer=nl.sbuf)
        tile[i_p, i_a * 4 + i_b] = nl.copy(t)
        nl.store(out, value=tile)
        return out
    out = nki.simulate(k)(x, np.zeros_like(x))
    np.testing.assert_array_equal(out, x.reshape(16, 4, 6).transpose(0, 2, 1).reshape(16, 24))


def test_assignment_of_a_reduction_into_a_column_is_partition_aligned():
    x = rand(128, 64)

    @nki.jit
    def k(x, out):
        t = nl.load(x)
        res = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
        i_p = nl.arange(128)[:, None]
        for c in nl.affine_range(4):
            res[i_p, c] = legacy_isa.tensor_reduce(np.max, t[:, c * 16:(c + 1) * 16], axis=(1,), negate=True)
        nl.store(out, value=res)
        return out
    out = nki.simulate(k)(x, np.zeros((128, 4), F32))
    np.testing.assert_array_equal(out, -x.reshape(128, 4, 16).max(2))


def test_assignment_shape_mismatch_is_still_a_rule():
    @nki.jit
    def k():
        t = nl.zeros((128, 4), nl.float32)
        t[0:128, 0:4] = nl.zeros((128, 3), nl.float32)  # <- rule
    expect_rule(k, [], "shape-mismatch")


@pytest.mark.parametrize("n", [600, 512, 100])
def test_masked_bn_stats_on_a_ragged_tail(n):
    x = rand(128, n) + 1.0

    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        t = nl.load(x)
        i_f, i_s = nl.mgrid[0:512, 0:6]
        chunks = (n + 511) // 512
        stats = nl.ndarray((128, 6 * chunks), nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(chunks):
            stats[i_p, j * 6 + i_s] = legacy_isa.bn_stats(t[i_p, j * 512 + i_f], mask=(j * 512 + i_f < n),
                                                          dtype=nl.float32)
        nl.store(out, value=legacy_isa.bn_aggr(stats))
        return out
    out = nki.simulate(k)(x, np.zeros((128, 2), F32))
    np.testing.assert_allclose(out[:, 0], x.mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], x.var(1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [F32, ml_dtypes.bfloat16])
def test_masked_elementwise_leaves_masked_out_positions_unwritten(dtype):
    n = 200
    x = rand(128, n).astype(dtype)

    @nki.jit
    def k(x, out, tail):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(x)
        for j in nl.affine_range(2):
            e = nl.exp(t[i_p, j * 128 + i_f], mask=(j * 128 + i_f < n))
            assert e.shape == (128, 128)
            nl.store(out[i_p, j * 128 + i_f], value=e, mask=(j * 128 + i_f < n))
        nl.store(tail, value=e)
        return out, tail
    out, tail = nki.simulate(k)(x, np.zeros((128, n), dtype), np.full((128, 128), 7, dtype))
    ref = np.exp(x.astype(F32))
    tol = 1e-6 if dtype == F32 else 1e-2
    np.testing.assert_allclose(out.astype(F32), ref, rtol=tol)
    np.testing.assert_allclose(tail[:, :n - 128].astype(F32), ref[:, 128:], rtol=tol)
    assert not tail[:, n - 128:].astype(F32).any()  # not computed: the new tile holds no result there


def test_masked_legacy_isa_instructions_on_a_ragged_tail():
    # previous-generation nisa.* with mask=: the masked-out tail is neither read nor computed
    n = 200
    x, b = rand(128, n), rand(128, 1)

    @nki.jit
    def k(x, b, act, tt, ts, red, cp):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t, tb = nl.load(x), nl.load(b)
        row_sum = nl.zeros((128, 1), nl.float32)
        for j in nl.affine_range(2):
            cols, keep = j * 128 + i_f, (j * 128 + i_f < n)
            v = t[i_p, cols]
            nl.store(act[i_p, cols], value=legacy_isa.activation(nl.exp, v, bias=tb, mask=keep), mask=keep)
            nl.store(tt[i_p, cols], value=legacy_isa.tensor_tensor(v, v, nl.multiply, mask=keep), mask=keep)
            nl.store(ts[i_p, cols], value=legacy_isa.tensor_scalar(v, nl.add, tb, mask=keep), mask=keep)
            nl.store(cp[i_p, cols], value=legacy_isa.tensor_copy(v, mask=keep), mask=keep)
            row_sum += legacy_isa.tensor_reduce(nl.add, v, axis=1, keepdims=True, mask=keep)
        nl.store(red, value=row_sum)
    outs = [np.zeros((128, n), F32) for _ in range(3)] + [np.zeros((128, 1), F32), np.zeros((128, n), F32)]
    nki.simulate(k)(x, b, *outs)
    act, tt, ts, red, cp = outs
    np.testing.assert_allclose(act, np.exp(x + b), rtol=1e-6)
    np.testing.assert_allclose(tt, x * x, rtol=1e-6)
    np.testing.assert_allclose(ts, x + b, rtol=1e-6)
    np.testing.assert_array_equal(cp, x)
    np.testing.assert_allclose(red[:, 0], x.sum(1), rtol=1e-5, atol=1e-5)


def test_out_of_range_index_without_mask_is_a_rule():
    @nki.jit
    def k(x):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(x)
        nl.exp(t[i_p, 128 + i_f])  # <- rule
    expect_rule(k, [rand(128, 200)], "out-of-bounds")


def test_mask_that_keeps_out_of_range_positions_is_a_rule():
    @nki.jit
    def k(x):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(x)
        nl.exp(t[i_p, 128 + i_f], mask=(128 + i_f < 250))  # <- rule
    expect_rule(k, [rand(128, 200)], "out-of-bounds")


def test_broadcast_to_of_a_reduction_result_is_partition_aligned():
    x = rand(128, 64)

    @nki.jit
    def k(x, out):
        t = nl.load(x)
        total = legacy_isa.tensor_reduce(np.add, data=t, axis=(1,))
        nl.store(out, value=t * (1.0 / total).broadcast_to((128, 64)))
        return out
    out = nki.simulate(k)(x, np.zeros_like(x))
    np.testing.assert_allclose(out, x / x.sum(1, keepdims=True), rtol=1e-4)


def test_store_through_index_variables_in_another_order_than_the_tile():
    # out[i * 128 + i_f, i_p] of a tile whose partitions are i_p: the tile's axes are the mgrid's
    # declaration order, the destination's first index uses the later variable (a transposing store)
    x = rand(64, 256)

    @nki.jit
    def k(x, out):
        i_p, i_f = nl.mgrid[0:64, 0:128]
        for i in nl.affine_range(2):
            t = nl.load(x[i_p, i * 128 + i_f])
            nl.store(out[i * 128 + i_f, i_p], value=t)
        return out
    out = nki.simulate(k)(x, np.zeros((256, 64), F32))
    np.testing.assert_array_equal(out, x.T)


def test_store_of_a_tile_that_fits_neither_order_is_a_rule():
    @nki.jit
    def k(x, out):
        i_p, i_f = nl.mgrid[0:64, 0:128]
        nl.store(out[i_f, i_p], value=nl.load(x))  # <- rule
        return out
    expect_rule(k, [rand(32, 128), np.zeros((128, 64), F32)], "shape-mismatch")
