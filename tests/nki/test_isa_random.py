"""nki.isa random instructions: distributions, determinism, seeding and state round trips (the
simulator's generator has the documented distributions, not the hardware's bit stream)."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa

TRN3 = {"hardware": "trn3"}


@pytest.mark.parametrize("dtype,bits", [(np.uint32, 32), (np.uint16, 16), (np.int8, 8)])
def test_rng_bits_cover_the_dtype(dtype, bits):
    out, = run_isa(lambda: nisa.rng(sbuf((128, 256), dtype)))
    info = np.iinfo(dtype)
    assert out.dtype == dtype
    # uniform bits: the mean is mid-range and both ends of the range occur (low bits of 32-bit draws)
    assert abs(out.astype(np.float64).mean() - (info.min + info.max) / 2) < 0.02 * (2.0 ** bits)
    if bits == 8:
        assert out.min() == info.min and out.max() == info.max


def test_rng_is_deterministic_per_run_and_differs_between_calls():
    def body():
        return nisa.rng(sbuf((16, 64), nl.uint32)), nisa.rng(sbuf((16, 64), nl.uint32), engine=nisa.engine.gpsimd)
    first, second = run_isa(body), run_isa(body)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert np.mean(first[0] == first[1]) < 0.01


def test_set_rng_seed_reproduces_a_sequence():
    def body(seed_a, seed_b):
        nisa.set_rng_seed(seed_a)
        x = nisa.rng(sbuf((8, 32), nl.uint32))
        nisa.set_rng_seed(seed_b)
        y = nisa.rng(sbuf((8, 32), nl.uint32))
        nisa.set_rng_seed(seed_a)
        z = nisa.rng(sbuf((8, 32), nl.uint32))
        return x, y, z
    x, y, z = run_isa(body, np.array([[42]], np.uint32), np.array([[43]], np.uint32))
    np.testing.assert_array_equal(x, z)
    assert np.mean(x == y) < 0.01


def test_rand_state_round_trip_on_both_engines():
    def body():
        gp, ve = sbuf((128, 6), nl.uint32), sbuf((128, 24), nl.uint32)
        nisa.rand_get_state(gp)  # 6 words: the GpSimd state
        nisa.rand_get_state(ve, engine=nisa.engine.vector)
        first = nisa.rng(sbuf((128, 16), nl.uint32), engine=nisa.engine.gpsimd)
        nisa.rand_set_state(gp)
        again = nisa.rng(sbuf((128, 16), nl.uint32), engine=nisa.engine.gpsimd)
        nisa.rand_set_state(ve)
        return first, again, nisa.rand2(sbuf((128, 16), nl.float32), -1.0, 1.0)
    first, again, u = run_isa(body, **TRN3)
    np.testing.assert_array_equal(first, again)
    assert u.min() >= -1.0 and u.max() < 1.0


def test_rand2_uniform_per_partition_range_and_dtype():
    low, high = rand(128, 1, low=-5, high=0), rand(128, 1, low=1, high=5)

    def body(lo, hi):
        return nisa.rand2(sbuf((128, 2000), nl.float32), lo, hi), nisa.rand2(sbuf((128, 8), nl.bfloat16), 0.0, 1.0)
    out, small = run_isa(body, low, high, **TRN3)
    assert np.all(out >= low) and np.all(out <= high)
    mean = (out - low) / (high - low)
    assert abs(mean.mean() - 0.5) < 0.01 and abs(mean.var() - 1 / 12) < 0.005
    assert small.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32])
def test_dropout_drops_with_probability(dtype):
    x = rand(128, 512, low=1, high=3).astype(dtype)
    prob = np.linspace(0, 1, 128, dtype=np.float32)[:, None]

    def body(t, p):
        return nisa.dropout(sbuf(t.shape, t.dtype), t, p), legacy_isa.dropout(t, 0.25)
    out, scalar = run_isa(body, x, prob)
    kept = out != 0
    np.testing.assert_array_equal(out[kept], x[kept])  # kept elements are not rescaled
    np.testing.assert_allclose(1 - kept.mean(axis=1), prob[:, 0], atol=0.08)
    assert kept[0].all() and not kept[-1].any()
    assert abs((scalar == 0).mean() - 0.25) < 0.01


def test_rng_rule_float_dst():
    def body():
        nisa.rng(sbuf((4, 4), nl.float32))  # <- rule
    expect_isa_rule(body, [], "dtype")


def test_rand_set_state_rule_words():
    def body(s):
        nisa.rand_set_state(s)  # <- rule
    expect_isa_rule(body, [np.zeros((4, 5), np.uint32)], "rng-state")


def test_rand2_rule_generation():
    def body():
        nisa.rand2(sbuf((4, 4), nl.float32), 0.0, 1.0)  # <- rule
    expect_isa_rule(body, [], "nc-version")


def test_set_rng_seed_rule_shape():
    def body(s):
        nisa.set_rng_seed(s)  # <- rule
    expect_isa_rule(body, [np.zeros((2, 1), np.uint32)], "seed")
