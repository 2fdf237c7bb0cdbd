"""Block dimensions of the previous generation (`nl.ndarray((B, nl.par_dim(P), F))`): each block is
its own (P, F) tile; partition rule on P, capacity blocks x free per partition, block views share
storage, whole-block instructions run per block or are refused."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.legacy.isa as nisa
import nki.legacy.language as nl
from helpers_nki import expect_rule

F32 = np.float32
rng = np.random.default_rng(7)


def _round(x, dtype):
    return np.asarray(x, F32).astype(dtype).astype(F32)


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16, nl.int32])
@pytest.mark.parametrize("p,f", [(128, 64), (5, 1), (37, 33)])
def test_blocks_accumulate_per_block(dtype, p, f):
    """Accumulating into block i (`acc[i, 0:P, 0:F] += x`, `acc[i] = ...`) touches block i only."""
    n_blocks, steps = 3, 2
    x = rng.integers(-8, 8, size=(steps, n_blocks, p, f)).astype(F32)

    def k(x_hbm):
        out = nl.ndarray((n_blocks, p, f), dtype=dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((n_blocks, nl.par_dim(p), f), dtype=dtype)
        assert acc.shape == (n_blocks, p, f)
        for s in nl.affine_range(steps):
            for b in nl.affine_range(n_blocks):
                acc[b, 0:p, 0:f] += nl.load(x_hbm[s, b], dtype=dtype)
        acc[1] = nl.multiply(acc[1], 2, dtype=dtype)
        for b in nl.affine_range(n_blocks):
            nl.store(out[b], value=acc[b])
        return out
    got = nki.simulate(k)(x)
    want = x.sum(axis=0)
    want[1] *= 2
    np.testing.assert_array_equal(np.asarray(got, F32), _round(want, dtype))


def test_block_view_is_a_partition_first_tile_sharing_storage():
    def k(x_hbm):
        out = nl.ndarray((2, 3, 8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.full((2, 3, nl.par_dim(8), 4), fill_value=-1.0, dtype=nl.float32)
        blk = t[1, 2]
        assert blk.shape == (8, 4) and t[0, 1, 0:8, 1:3].shape == (8, 2) and t[0, 0, 3].shape == (1, 4)
        blk[...] = nl.load(x_hbm)                 # writes through the view
        t[0, 1, 0:8, 1:3] = nl.load(x_hbm[:, 0:2])
        nl.store(out, value=t)                    # DMA of the whole tensor: the logical (B, B, P, F) values
        return out
    x = rng.standard_normal((8, 4)).astype(F32)
    got = nki.simulate(k)(x)
    want = np.full((2, 3, 8, 4), -1.0, F32)
    want[1, 2] = x
    want[0, 1, :, 1:3] = x[:, 0:2]
    np.testing.assert_array_equal(got, want)


def _scale_row(row, x_row, factor):
    """A sub-kernel that takes one row of blocks (t[i] of a (B0, B1, P, F) tensor) and indexes it again."""
    for j in nl.affine_range(row.shape[0]):
        row[j] = nl.load(x_row[j])
    row[...] = nl.multiply(row, factor)  # an instruction per block of the row


@pytest.mark.parametrize("p,f", [(128, 8), (5, 3)])
def test_fewer_ints_than_block_dims_give_the_remaining_blocks(p, f):
    """Published semantics: ints index the leading block dims; `t[i]` of blocks=(2, 3) is the (3,)
    block tensor of row i, a view a sub-kernel indexes again, updated in place by `t[i] += v`."""
    x = rng.standard_normal((2, 3, p, f)).astype(F32)

    def k(x_hbm):
        out = nl.ndarray((2, 3, p, f), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.zeros((2, 3, nl.par_dim(p), f), dtype=nl.float32)
        row = t[1]
        assert row.shape == (3, p, f) and row.block_shape == (3,) and row[2].shape == (p, f)
        for i in nl.affine_range(2):
            _scale_row(t[i], x_hbm[i], i + 2.0)
        t[0] += t[1]        # a row of blocks plus a row: per block, row 0 only
        nl.store(out, value=t)
        return out
    got = nki.simulate(k)(x)
    want = x * np.array([2.0, 3.0], F32)[:, None, None, None]
    want[0] += want[1]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_rule_leading_block_index_out_of_bounds_and_slices_of_block_dims():
    def k(x):
        t = nl.zeros((2, 3, nl.par_dim(8), 4), dtype=nl.float32)
        return t[2]  # <- rule
    expect_rule(k, [np.zeros(1, F32)], "out-of-bounds")

    def k2(x):
        t = nl.zeros((2, 3, nl.par_dim(8), 4), dtype=nl.float32)
        return t[1, 0:2]  # <- rule
    expect_rule(k2, [np.zeros(1, F32)], "block-index")


def test_capacity_is_blocks_times_free_per_partition():
    def k(x_hbm):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((4, nl.par_dim(128), 1024), dtype=nl.float32)  # 16 KiB per partition, not 512 KiB
        wide = nl.ndarray((2, nl.par_dim(128), 2, 256), dtype=nl.bfloat16)  # 2 KiB per partition
        assert wide.shape == (2, 128, 2, 256)
        nl.store(out, value=acc[3, :, 0:1])
        return out
    nki.simulate(k)(np.zeros((1, 1), F32))
    assert nki.simulator.last_report().peak_sbuf_bytes_per_partition == 4 * 1024 * 4 + 2 * 2 * 256 * 2


def test_psum_blocks_take_banks_and_accumulate_matmuls():
    a = rng.standard_normal((2, 64, 32)).astype(F32)
    b = rng.standard_normal((64, 16)).astype(F32)

    def k(a_hbm, b_hbm):
        out = nl.ndarray((2, 32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.zeros((2, nl.par_dim(32), 512), dtype=nl.float32, buffer=nl.psum)
        rhs = nl.load(b_hbm)
        for i in nl.affine_range(2):
            for _ in nl.affine_range(2):
                ps[i, :, 0:16] += nisa.nc_matmul(nl.load(a_hbm[i]), rhs)
        for i in nl.affine_range(2):
            nl.store(out[i], value=nl.copy(ps[i, :, 0:16]))
        return out
    got = nki.simulate(k)(a, b)
    np.testing.assert_allclose(got, 2 * np.einsum("ikm,kn->imn", a, b), rtol=1e-5, atol=1e-5)
    assert nki.simulator.last_report().peak_psum_banks >= 2


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_whole_block_elementwise_runs_per_block(dtype):
    x = rng.standard_normal((3, 16, 8)).astype(F32)
    y = rng.standard_normal((3, 16, 8)).astype(F32)

    def k(x_hbm, y_hbm):
        out = nl.ndarray((4, 3, 16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((3, nl.par_dim(16), 8), dtype=dtype)
        b = nl.ndarray((3, nl.par_dim(16), 8), dtype=dtype)
        for i in nl.affine_range(3):
            a[i] = nl.load(x_hbm[i])
            b[i] = nl.load(y_hbm[i])
        results = [a + b, nl.exp(a), nisa.tensor_scalar(a, np.multiply, 3.0), nl.copy(b, dtype=nl.float32)]
        for j, r in enumerate(results):
            assert r.shape == (3, 16, 8) and r.block_shape == (3,)
            nl.store(out[j], value=r)
        a += b                                    # in place, block by block
        nl.store(out[3], value=a)
        return out
    got = nki.simulate(k)(x, y)
    xr, yr = _round(x, dtype), _round(y, dtype)
    want = [_round(xr + yr, dtype), _round(np.exp(xr), dtype), _round(xr * 3, dtype), yr]
    tol = dict(rtol=1e-5) if dtype == nl.float32 else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[:3], np.stack(want[:3]), **tol)
    np.testing.assert_allclose(got[3], _round(xr + yr, dtype), **tol)
    # the per-block results count one instruction per block
    counts = nki.simulator.last_report().instructions
    assert sum(1 for r in counts if r.opcode == "activation[exp]") == 3


def test_rule_partition_dim_of_block_tensor():
    def k(x):
        t = nl.zeros((2, nl.par_dim(129), 4), dtype=nl.float32)  # <- rule
        return t
    err = expect_rule(k, [np.zeros(1, F32)], "partition-dim")
    assert "par_dim" in str(err)


def test_rule_sbuf_capacity_of_block_tensor():
    def k(x):
        t = nl.zeros((64, nl.par_dim(128), 1024), dtype=nl.float32)  # <- rule
        return t
    expect_rule(k, [np.zeros(1, F32)], "sbuf-capacity")


def test_rule_block_operand_for_non_elementwise():
    def k(x):
        t = nl.zeros((2, nl.par_dim(8), 4), dtype=nl.float32)
        return nl.sum(t, axis=1)  # <- rule
    expect_rule(k, [np.zeros(1, F32)], "block-operand")


def test_rule_block_index_slicing_across_blocks():
    def k(x):
        t = nl.zeros((2, nl.par_dim(8), 4), dtype=nl.float32)
        return t[0:2, 0:4]  # <- rule
    expect_rule(k, [np.zeros(1, F32)], "block-index")


def test_rule_block_shape_mismatch_and_out_of_bounds():
    def k(x):
        a = nl.zeros((2, nl.par_dim(8), 4), dtype=nl.float32)
        b = nl.zeros((3, nl.par_dim(8), 4), dtype=nl.float32)
        return a + b  # <- rule
    expect_rule(k, [np.zeros(1, F32)], "block-shape")

    def k2(x):
        a = nl.zeros((2, nl.par_dim(8), 4), dtype=nl.float32)
        return a[2]  # <- rule
    expect_rule(k2, [np.zeros(1, F32)], "out-of-bounds")


def test_par_dim_first_and_hbm_are_ordinary_tensors():
    def k(x):
        t = nl.zeros((nl.par_dim(8), 4), dtype=nl.float32)
        h = nl.ndarray((2, nl.par_dim(8), 4), dtype=nl.float32, buffer=nl.private_hbm)
        z = nl.zeros_like(nl.zeros((2, nl.par_dim(8), 4), dtype=nl.bfloat16))
        assert type(t) is nl.NkiTensor and type(h) is nl.NkiTensor and h.shape == (2, 8, 4)
        assert z.block_shape == (2,) and z.dtype == ml_dtypes.bfloat16
        assert nl.par_dim(8) == 8 and nl.par_dim(8) + 1 == 9
        return t
    nki.simulate(k)(np.zeros(1, F32))
