"""nki.isa selection (tensor_copy_predicated, affine_select, range_select, select_reduce), ranking (max8,
nc_find_index8, nc_match_replace8, topk) and index instructions (nonzero_with_count, sequence_bounds,
nc_stream_shuffle) against numpy."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import RNG, expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa

BF16 = ml_dtypes.bfloat16
FP32_MIN = np.finfo(np.float32).min


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("shape", [(128, 16), (3, 1)])
def test_tensor_copy_predicated(dtype, shape):
    src, old = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    pred = RNG.integers(0, 2, shape).astype(np.uint8)

    def body(s, d, p):
        nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
        return d
    out, = run_isa(body, src, old, pred)
    np.testing.assert_array_equal(out, np.where(pred != 0, src, old))


def test_tensor_copy_predicated_scalar_reverse_and_legacy():
    old, pred = rand(16, 8), RNG.integers(0, 3, (16, 8)).astype(np.uint16)

    def body(d, p):
        nisa.tensor_copy_predicated(d, 7.0, p, reverse_pred=True)
        legacy_isa.tensor_copy_predicated(src=-1.0, dst=d[0:1, :], predicate=p[0:1, :])
        return d
    out, = run_isa(body, old, pred)
    ref = np.where(pred == 0, 7.0, old)
    ref[0] = np.where(pred[0] != 0, -1.0, ref[0])
    np.testing.assert_array_equal(out, ref)


def test_tensor_copy_predicated_rule_dtype():
    def body(s, d, p):
        nisa.tensor_copy_predicated(d, s, p)  # <- rule
    expect_isa_rule(body, [rand(4, 4), rand(4, 4, dtype=BF16), np.ones((4, 4), np.uint8)], "dtype")


def test_tensor_copy_predicated_rule_predicate_dtype():
    def body(d, p):
        nisa.tensor_copy_predicated(d, 1.0, p)  # <- rule
    expect_isa_rule(body, [rand(4, 4), rand(4, 4)], "dtype")


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_affine_select_causal_mask(dtype):
    x = rand(128, 2, 64, dtype=dtype)

    def body(t):
        out = sbuf(t.shape, t.dtype)
        # keep key j <= query p: p - j >= 0 over a [2, 64] free layout of (block, j)
        return nisa.affine_select(out, [[0, 2], [-1, 64]], 1, t, -9984.0, cmp_op=nl.greater_equal)
    out, = run_isa(body, x)
    p, j = np.arange(128)[:, None, None], np.arange(64)[None, None, :]
    np.testing.assert_array_equal(out, np.where(p - j >= 0, x, np.float32(-9984.0)).astype(dtype))


def test_affine_select_default_equal_and_offset():
    x = rand(8, 8)
    out, = run_isa(lambda t: nisa.affine_select(sbuf((8, 8), nl.float32), [[1, 8]], -1, t, 0.0, offset=2), x)
    p, j = np.arange(8)[:, None], np.arange(8)[None, :]
    np.testing.assert_array_equal(out, np.where(2 - p + j == 0, x, 0.0))


def test_legacy_affine_select_expression():
    x = rand(64, 64)
    i_p, i_f = nl.arange(64)[:, None], nl.arange(64)[None, :]
    out, = run_isa(lambda t: legacy_isa.affine_select(i_p >= i_f, t, -1e4, dtype=nl.bfloat16), x)
    assert out.dtype == BF16
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((64, 64))) > 0, x, -1e4).astype(BF16))


def test_affine_select_rule_pattern_size():
    def body(t):
        nisa.affine_select(sbuf((8, 8), nl.float32), [[1, 4]], 1, t, 0.0)  # <- rule
    expect_isa_rule(body, [rand(8, 8)], "affine-pattern")


def test_range_select_and_max_register():
    x, lo, hi = rand(128, 64), RNG.integers(0, 40, (128, 1)).astype(np.float32), None
    hi = lo + RNG.integers(1, 30, (128, 1)).astype(np.float32)

    def body(t, b0, b1):
        out, res = sbuf((128, 64), nl.float32), sbuf((128, 1), nl.float32)
        nisa.range_select(out, t, nl.greater_equal, nl.less, b0, b1, reduce_res=res, range_start=4)
        return out, res
    out, res = run_isa(body, x, lo, hi)
    index = 4 + np.arange(64)[None, :]
    ref = np.where((index >= lo) & (index < hi), x, FP32_MIN)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(res[:, 0], ref.max(axis=1))


def test_legacy_range_select_bf16_fill_and_reduce():
    x, lo, hi = rand(4, 10), np.full((4, 1), 2.0, np.float32), np.full((4, 1), 5.0, np.float32)

    def body(t, b0, b1):
        res = sbuf((4, 1), nl.float32)
        out = legacy_isa.range_select(on_true_tile=t, comp_op0=np.greater, comp_op1=np.less_equal, bound0=b0,
                                      bound1=b1, reduce_res=res, on_false_value=legacy_isa.fp32.min,
                                      dtype=nl.bfloat16)
        return out, res
    out, res = run_isa(body, x, lo, hi)
    keep = (np.arange(10) > 2) & (np.arange(10) <= 5)
    assert np.all(np.isneginf(out[:, ~keep].astype(np.float32)))  # FP32_MIN rounds to -inf in bf16
    np.testing.assert_array_equal(res[:, 0], x[:, keep].max(axis=1))


def test_range_select_rule_fill_value():
    def body(t, b):
        nisa.range_select(sbuf((4, 4), nl.float32), t, nl.less, nl.less, b, b, on_false_value=0.0)  # <- rule
    expect_isa_rule(body, [rand(4, 4), rand(4, 1)], "range-select-fill")


def test_select_reduce_vector_fallback_and_accumulation():
    a, b, fb = rand(32, 12), rand(32, 12), rand(32, 1)
    pa, pb = RNG.integers(0, 2, (32, 12)).astype(np.int8), RNG.integers(0, 2, (32, 12)).astype(np.uint8)

    def body(x, y, f, p, q):
        out, res = sbuf((32, 12), nl.float32), sbuf((32, 1), nl.float32)
        nisa.select_reduce(out, p, x, f, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.select_reduce(out, q, y, -3.0, reduce_res=res, reduce_cmd=nisa.reduce_cmd.reduce, reverse_pred=True)
        return out, res
    out, res = run_isa(body, a, b, fb, pa, pb)
    first, second = np.where(pa != 0, a, fb), np.where(pb == 0, b, -3.0)
    np.testing.assert_array_equal(out, second)
    np.testing.assert_array_equal(res[:, 0], np.maximum(first.max(axis=1), second.max(axis=1)))


def test_select_reduce_rule_on_true_int32():
    def body(x, p):
        nisa.select_reduce(sbuf((4, 4), nl.int32), p, x, 0.0)  # <- rule
    expect_isa_rule(body, [np.ones((4, 4), np.int32), np.ones((4, 4), np.uint8)], "dtype")


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_max8_find_index8_and_match_replace8(dtype):
    x = RNG.permutation(128 * 40).reshape(128, 40).astype(dtype)
    x[5, 3] = x[5, 17] = 1e4  # a repeated maximum: two distinct positions

    def body(t):
        top = nisa.max8(sbuf((128, 8), t.dtype), t)
        index = nisa.nc_find_index8(sbuf((128, 8), nl.uint32), t, top)
        where = sbuf((128, 8), nl.uint32)
        replaced = nisa.nc_match_replace8(sbuf(t.shape, t.dtype), t, top, -1.0, dst_idx=where)
        return top, index, replaced, where
    top, index, replaced, where = run_isa(body, x)
    ref_top = -np.sort(-x.astype(np.float32), axis=1)[:, :8]
    np.testing.assert_array_equal(top.astype(np.float32), ref_top)
    np.testing.assert_array_equal(x[np.arange(128)[:, None], index].astype(np.float32), ref_top)
    assert index[5, 0] == index[5, 1] == 3  # find_index8: first occurrence for both
    assert sorted(where[5, :2]) == [3, 17]  # match_replace8: successive occurrences
    ref = x.astype(np.float32).copy()
    np.put_along_axis(ref, where.astype(np.int64), -1.0, axis=1)
    np.testing.assert_array_equal(replaced.astype(np.float32), ref)
    assert np.all(np.sort(where, axis=1) == np.sort(np.argsort(-x.astype(np.float32), axis=1, kind="stable")[:, :8],
                                                    axis=1))


def test_legacy_ranking_forms_return_tiles():
    x = rand(16, 3, 8)
    top, index, replaced = run_isa(lambda t: (legacy_isa.max8(src=t), legacy_isa.nc_find_index8(
        data=t, vals=legacy_isa.max8(src=t), dtype=nl.uint16), legacy_isa.nc_match_replace8(
        data=t, vals=legacy_isa.max8(src=t), imm=0.0)), x)
    flat = x.reshape(16, -1)
    assert index.dtype == np.uint16
    np.testing.assert_array_equal(index, np.argsort(-flat, axis=1, kind="stable")[:, :8])
    np.testing.assert_array_equal(top, -np.sort(-flat, axis=1)[:, :8])
    assert replaced.shape == x.shape and np.count_nonzero(replaced == 0) == 16 * 8


def test_max8_rule_elements_per_partition():
    def body(t):
        nisa.max8(sbuf((4, 8), nl.float32), t)  # <- rule
    expect_isa_rule(body, [rand(4, 7)], "elements-per-partition")


def test_find_index8_rule_value_not_found():
    def body(t, v):
        nisa.nc_find_index8(sbuf((4, 8), nl.uint32), t, v)  # <- rule
    expect_isa_rule(body, [rand(4, 16), rand(4, 8, low=5, high=6)], "value-not-found")


def _snake(values, columns):
    """[G, n] groups -> [G * 16, columns] snake tiles (element i at partition i % 16, column i // 16)."""
    groups, n = values.shape
    padded = np.zeros((groups, columns * 16), values.dtype)
    padded[:, :n] = values
    return padded.reshape(groups, columns, 16).transpose(0, 2, 1).reshape(groups * 16, columns)


@pytest.mark.parametrize("groups,n,k", [(8, 200, 20), (1, 8, 8), (2, 100, 1)])
def test_topk_snake_layout(groups, n, k):
    vals = np.stack([RNG.permutation(n) for _ in range(groups)]).astype(BF16)  # distinct (n < 256): no ties
    src = _snake(vals, -(-n // 16))
    old_v, old_i = np.full((groups * 16, k), 7, BF16), np.full((groups * 16, k), 9, np.uint32)

    def body(s, v, i):
        return nisa.topk(v, i, s, n=n)
    out_v, out_i = run_isa(body, src, old_v, old_i)
    best = np.argsort(-vals.astype(np.float32), axis=1)[:, :k][:, ::-1]
    slot = np.arange(k)
    rows = np.arange(groups)[:, None] * 16 + slot % 16
    np.testing.assert_array_equal(out_i[rows, slot // 16], best)
    np.testing.assert_array_equal(out_v[rows, slot // 16], np.take_along_axis(vals, best, axis=1))
    untouched = np.ones(out_v.shape, bool)
    untouched[rows, slot // 16] = False
    assert np.all(out_v[untouched] == 7) and np.all(out_i[untouched] == 9)


def test_topk_rule_partitions():
    def body(s, v, i):
        nisa.topk(v, i, s, n=16)  # <- rule
    expect_isa_rule(body, [rand(8, 2, dtype=BF16), np.zeros((8, 8), BF16), np.zeros((8, 8), np.uint32)],
                    "topk-layout")


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_nonzero_with_count_on_gpsimd_core_partitions(dtype):
    src = (RNG.random((128, 24)) < 0.3).astype(dtype) * RNG.integers(1, 5, (128, 24)).astype(dtype)
    src[16] = 0  # no nonzeros
    old = np.full((128, 25), 5, np.int32)

    def body(s, d):
        return nisa.nonzero_with_count(d, s, index_offset=100, padding_val=-7)
    out, = run_isa(body, src, old)
    served = np.arange(0, 128, 16)
    for p in range(128):
        if p not in served:
            np.testing.assert_array_equal(out[p], 5)
            continue
        found = np.flatnonzero(src[p]) + 100
        ref = np.concatenate([found, np.full(24 - found.size, -7), [found.size]])
        np.testing.assert_array_equal(out[p], ref)


def test_nonzero_with_count_rule_dst_size():
    def body(s, d):
        nisa.nonzero_with_count(d, s)  # <- rule
    expect_isa_rule(body, [rand(16, 8), np.zeros((16, 8), np.int32)], "shape-mismatch")


def sequence_bounds_reference(ids):
    n = ids.size
    start, end = np.zeros(n), np.zeros(n)
    start[0] = 0 if ids[0] != 0 else n
    for i in range(1, n):
        start[i] = n if ids[i] == 0 else (start[i - 1] if ids[i] == ids[i - 1] else i)
    end[-1] = n if ids[-1] != 0 else -1
    for i in range(n - 2, -1, -1):
        end[i] = -1 if ids[i] == 0 else (end[i + 1] if ids[i] == ids[i + 1] else i + 1)
    return np.stack([start, end])[None]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sequence_bounds(dtype):
    ids = np.array([[1, 1, 1, 2, 2, 0, 0, 3, 3, 3, 1, 0, 4]], dtype)
    new, into = run_isa(lambda s: (legacy_isa.sequence_bounds(segment_ids=s),
                                   nisa.sequence_bounds(sbuf((1, 2, 13), nl.float32), s)), ids)
    ref = sequence_bounds_reference(ids[0])
    np.testing.assert_array_equal(into, ref)
    np.testing.assert_array_equal(new, ref.astype(dtype))


def test_sequence_bounds_rule_partitions():
    def body(s):
        nisa.sequence_bounds(sbuf((2, 2, 4), nl.float32), s)  # <- rule
    expect_isa_rule(body, [np.ones((2, 4), np.float32)], "partition-dim")


@pytest.mark.parametrize("parts", [128, 32, 20])
def test_nc_stream_shuffle_within_quadrants(parts):
    src, old = rand(parts, 6), rand(parts, 6)
    mask = [(i * 7 + 3) % 32 for i in range(32)]
    mask[4] = 255
    if parts < 32:
        mask = [m if m == 255 else m % parts for m in mask]

    def body(s, d):
        return nisa.nc_stream_shuffle(d, s, mask)
    out, = run_isa(body, src, old)
    for p in range(parts):
        m = mask[p % 32]
        np.testing.assert_array_equal(out[p], old[p] if m == 255 else src[p - p % 32 + m])


def test_nc_stream_shuffle_in_place_legacy():
    x = rand(64, 3)
    mask = list(range(31, -1, -1))

    def body(t):
        legacy_isa.nc_stream_shuffle(t, t, mask)
        return t
    out, = run_isa(body, x)
    np.testing.assert_array_equal(out, x.reshape(2, 32, 3)[:, ::-1].reshape(64, 3))


def test_nc_stream_shuffle_rule_mask():
    def body(s, d):
        nisa.nc_stream_shuffle(d, s, list(range(16)))  # <- rule
    expect_isa_rule(body, [rand(32, 2), rand(32, 2)], "shuffle-mask")
