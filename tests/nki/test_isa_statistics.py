"""nki.isa bn_stats / bn_aggr / tensor_partition_reduce against numpy (current and legacy forms)."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa

BF16 = ml_dtypes.bfloat16


def _stats_then_aggr(x):
    stats = sbuf((x.shape[0], 6), nl.float32)
    nisa.bn_stats(dst=stats, data=x)
    moments = sbuf((x.shape[0], 2), nl.float32)
    nisa.bn_aggr(dst=moments, data=stats)
    return stats, moments


@pytest.mark.parametrize("shape", [(128, 512), (3, 1), (64, 37), (128, 4, 8)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_bn_stats_and_aggr_give_mean_and_variance(shape, dtype):
    x = rand(*shape, dtype=dtype)
    stats, moments = run_isa(_stats_then_aggr, x)
    flat = x.astype(np.float32).reshape(shape[0], -1)
    even, odd = flat[:, 0::2], flat[:, 1::2]
    np.testing.assert_allclose(stats[:, 0], even.shape[1])
    np.testing.assert_allclose(stats[:, 1], even.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[:, 2], even.var(axis=1) * even.shape[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats[:, 3], odd.shape[1])
    np.testing.assert_allclose(moments[:, 0], flat.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moments[:, 1], flat.var(axis=1), rtol=1e-4, atol=1e-6)


def test_bn_aggr_combines_stats_of_several_chunks():
    x = rand(128, 1200)

    def body(t):
        chunks = [(0, 512), (512, 1024), (1024, 1200)]
        stats = sbuf((128, 6 * len(chunks)), nl.float32)
        for i, (lo, hi) in enumerate(chunks):
            nisa.bn_stats(dst=stats[:, 6 * i:6 * i + 6], data=t[:, lo:hi])
        moments = sbuf((128, 2), nl.float32)
        nisa.bn_aggr(dst=moments, data=stats)
        return moments
    moments, = run_isa(body, x)
    np.testing.assert_allclose(moments[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moments[:, 1], x.var(axis=1), rtol=1e-4)


def test_legacy_bn_stats_and_aggr_return_new_tiles():
    x = rand(32, 100)
    moments, = run_isa(lambda t: legacy_isa.bn_aggr(legacy_isa.bn_stats(t), dtype=nl.float32), x)
    np.testing.assert_allclose(moments, np.stack([x.mean(axis=1), x.var(axis=1)], axis=1), rtol=1e-4, atol=1e-6)


def test_bn_stats_rule_free_size():
    def body(t):
        nisa.bn_stats(dst=sbuf((128, 6), nl.float32), data=t)  # <- rule
    expect_isa_rule(body, [rand(128, 513)], "bn-stats-fmax")


def test_bn_aggr_rule_triples():
    def body(t):
        nisa.bn_aggr(dst=sbuf((128, 2), nl.float32), data=t)  # <- rule
    expect_isa_rule(body, [rand(128, 7)], "bn-aggr-layout")


@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (np.max, np.max), (nl.mean, np.mean)])
@pytest.mark.parametrize("shape", [(128, 32, 4), (5, 1)])
def test_tensor_partition_reduce_float(op, ref, shape):
    x = rand(*shape)

    def body(t):
        out = sbuf((1,) + shape[1:], nl.float32)
        return nisa.tensor_partition_reduce(dst=out, op=op, data=t)
    out, = run_isa(body, x)
    np.testing.assert_allclose(out, ref(x, axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,ref", [("bitwise_or", np.bitwise_or), ("bitwise_and", np.bitwise_and),
                                      ("bitwise_xor", np.bitwise_xor)])
@pytest.mark.parametrize("dtype", [np.int32, np.uint16])
def test_tensor_partition_reduce_bitwise(name, ref, dtype):
    x = np.random.default_rng(1).integers(0, 2 ** 15, (64, 9)).astype(dtype)
    out, = run_isa(lambda t: legacy_isa.tensor_partition_reduce(name, t), x)
    np.testing.assert_array_equal(out, ref.reduce(x, axis=0, keepdims=True))
    assert out.dtype == dtype


def test_tensor_partition_reduce_rule_bitwise_on_floats():
    def body(t):
        legacy_isa.tensor_partition_reduce("bitwise_or", t)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "dtype")
