"""`mask=` on the previous generation's nisa.* instructions: masked-out elements are neither read
nor computed (a ragged tail of an index-expression access, here columns >= n or partitions >= p),
checked against NumPy on the valid part."""
from __future__ import annotations

import numpy as np
import pytest

import nki
import nki.language as nl
import nki.legacy.isa as legacy_isa

F32 = np.float32
N = 200  # columns: two chunks of 128, the second one ragged


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def chunked(instruction, x, width):
    """Run `instruction(tile_chunk, keep)` per 128-column chunk of x under the ragged-tail mask,
    storing its [128, width] results (width None: the chunk's own columns) side by side."""
    chunks = (x.shape[1] + 127) // 128

    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(x)
        for j in nl.affine_range(chunks):
            cols, keep = j * 128 + i_f, (j * 128 + i_f < x.shape[1])
            result = instruction(t[i_p, cols], keep)
            if width is None:
                nl.store(out[i_p, cols], value=result, mask=keep)
            else:
                i_w = nl.arange(width)[None, :]
                nl.store(out[i_p, j * width + i_w], value=result)
        return out
    return nki.simulate(k)(x, np.zeros((128, x.shape[1] if width is None else chunks * width), F32))


def test_elementwise_instructions_on_a_ragged_tail():
    x = rand(128, N) + 3.0
    np.testing.assert_allclose(chunked(lambda v, keep: legacy_isa.reciprocal(v, mask=keep), x, None), 1 / x,
                               rtol=1e-6)
    stt = chunked(lambda v, keep: legacy_isa.scalar_tensor_tensor(v, nl.multiply, 2.0, nl.add, v, mask=keep), x, None)
    np.testing.assert_allclose(stt, x * 2 + x, rtol=1e-6)
    kept = chunked(lambda v, keep: legacy_isa.dropout(v, 0.0, mask=keep), x, None)
    np.testing.assert_array_equal(kept, x)


def test_max8_of_a_ragged_tail():
    x = rand(128, N)
    top = chunked(lambda v, keep: legacy_isa.max8(v, mask=keep), x, 8)
    expected = [np.sort(x[:, c:c + 128], axis=1)[:, ::-1][:, :8] for c in (0, 128)]
    np.testing.assert_array_equal(top, np.concatenate(expected, axis=1))


@pytest.mark.parametrize("n", [N, 129])  # 129: a tail of one column, the free size of the result
def test_reduction_of_a_ragged_tail(n):
    x = rand(128, n)
    sums = chunked(lambda v, keep: legacy_isa.tensor_reduce(nl.add, v, axis=1, keepdims=True, mask=keep), x, 1)
    np.testing.assert_allclose(sums, np.stack([x[:, :128].sum(1), x[:, 128:].sum(1)], axis=1), rtol=1e-5, atol=1e-5)


def test_tensor_scalar_reduce_reduces_only_the_kept_elements():
    x = rand(128, N)

    @nki.jit
    def k(x, out, total):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(x)
        acc = nl.zeros((128, 1), nl.float32)
        for j in nl.affine_range(2):
            cols, keep = j * 128 + i_f, (j * 128 + i_f < N)
            part = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            scaled = legacy_isa.tensor_scalar_reduce(t[i_p, cols], nl.multiply, 3.0, nl.add, part, mask=keep)
            nl.store(out[i_p, cols], value=scaled, mask=keep)
            acc += part
        nl.store(total, value=acc)
        return out, total
    out, total = nki.simulate(k)(x, np.zeros_like(x), np.zeros((128, 1), F32))
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)
    np.testing.assert_allclose(total[:, 0], 3 * x.sum(1), rtol=1e-4, atol=1e-4)


def test_matmul_over_a_ragged_contraction():
    K, M, Nn = 200, 64, 32
    a, b = rand(K, M), rand(K, Nn, seed=1)

    @nki.jit
    def k(a, b, out):
        i_k = nl.arange(128)[:, None]
        i_m = nl.arange(M)[None, :]
        i_n = nl.arange(Nn)[None, :]
        acc = nl.zeros((M, Nn), nl.float32, buffer=nl.psum)
        for j in nl.affine_range(2):
            rows = j * 128 + i_k
            ta = nl.load(a[rows, i_m], mask=(rows < K))
            tb = nl.load(b[rows, i_n], mask=(rows < K))
            acc += legacy_isa.nc_matmul(ta[i_k, i_m], tb[i_k, i_n], mask=(rows < K))
        nl.store(out, value=nl.copy(acc))
        return out
    out = nki.simulate(k)(a, b, np.zeros((M, Nn), F32))
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-4, atol=1e-4)


P_KEPT = 100  # partitions kept by the mask: a ragged partition tail


def partition_tail(instruction, x, out):
    """Store ``instruction(tile, keep)`` of x's (128, F) tile under the mask ``i_p < P_KEPT``."""
    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(x.shape[1])[None, :]
        nl.store(out, value=nl.copy(instruction(nl.load(x)[i_p, i_f], i_p < P_KEPT)))
        return out
    return nki.simulate(k)(x, out)


def test_transpose_of_a_ragged_partition_tail_is_zero_outside_the_mask():
    x = rand(128, 64)
    out = partition_tail(lambda t, keep: legacy_isa.nc_transpose(t, mask=keep), x, np.full((64, 128), 7, F32))
    np.testing.assert_array_equal(out[:, :P_KEPT], x[:P_KEPT].T)
    assert not out[:, P_KEPT:].any()


def test_partition_reduce_over_the_kept_partitions():
    x = rand(128, 64)
    out = partition_tail(lambda t, keep: legacy_isa.tensor_partition_reduce(nl.maximum, t, mask=keep), x,
                         np.zeros((1, 64), F32))
    np.testing.assert_array_equal(out[0], x[:P_KEPT].max(0))


def test_instructions_writing_dst_keep_its_values_outside_the_mask():
    x, pred = rand(128, N), (rand(128, N, seed=2) > 0).astype(np.uint8)

    @nki.jit
    def k(x, pred, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(N)[None, :]
        dst = nl.full((128, N), 5.0, nl.float32)
        legacy_isa.tensor_copy_predicated(nl.load(x)[i_p, i_f], dst[i_p, i_f], nl.load(pred)[i_p, i_f],
                                          mask=(i_f < 150))
        nl.store(out, value=dst)
        return out
    out = nki.simulate(k)(x, pred, np.zeros_like(x))
    expected = np.full_like(x, 5.0)
    expected[:, :150] = np.where(pred[:, :150] != 0, x[:, :150], 5.0)
    np.testing.assert_array_equal(out, expected)


def test_new_tiles_of_memset_and_iota_are_zero_outside_the_mask():
    @nki.jit
    def k(out_memset, out_iota):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        nl.store(out_memset, value=legacy_isa.memset((128, 64), 2.5, nl.float32, mask=(i_f < 40)))
        nl.store(out_iota, value=legacy_isa.iota(i_p * 64 + i_f, nl.float32, mask=(i_f < 40)))
        return out_memset, out_iota
    memset, iota = nki.simulate(k)(np.ones((128, 64), F32), np.ones((128, 64), F32))
    keep = np.arange(64) < 40
    np.testing.assert_array_equal(memset, np.where(keep, 2.5, 0.0) * np.ones((128, 1)))
    np.testing.assert_array_equal(iota, np.where(keep, np.arange(128)[:, None] * 64 + np.arange(64), 0))
