"""nki.isa.iota, current form: dst = offset + partition * channel_multiplier + the access pattern's
terms, against numpy; the index-expression form; one test per rule."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import expect_isa_rule, rand, run_isa, sbuf

import nki
import nki.isa as nisa
import nki.language as nl

BF16 = ml_dtypes.bfloat16


def reference(parts: int, pattern: list, offset: int, multiplier: int) -> np.ndarray:
    """[P, prod(nums)] by explicit nested iteration of the pattern (independent of the simulator's
    vectorised construction)."""
    out = []
    for p in range(parts):
        row = [offset + p * multiplier]
        for step, num in pattern:
            row = [base + i * step for base in row for i in range(num)]
        out.append(row)
    return np.array(out, dtype=np.int64)


CASES = [  # (dst shape, pattern, offset, channel_multiplier)
    ((128, 64), [[1, 64]], 0, 64),                 # row-major positions of a full tile
    ((5, 3), [[-1, 3]], 2, 0),                     # descending, partition < 128
    ((128, 1), [[1, 1]], 0, 1),                    # partition index, free size 1
    ((1, 24), [[0, 1], [0, 4], [7, 6]], 0, 0),     # repeat of stage offsets (3 pairs, zero steps)
    ((16, 2, 3, 5), [[100, 2], [10, 3], [1, 5]], -40, 1000),  # 3-D free layout, negative offset
    ((8, 210), [[1, 2], [2, 3], [6, 5], [30, 7]], 5, -3),     # 4 pairs, ragged sizes
]


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32, np.uint32, np.int16])
@pytest.mark.parametrize("shape, pattern, offset, multiplier", CASES)
def test_iota_pattern_matches_numpy(dtype, shape, pattern, offset, multiplier):
    if np.dtype(dtype).kind == "u":  # unsigned destinations get non-negative values
        offset, multiplier, pattern = abs(offset), abs(multiplier), [[abs(s), n] for s, n in pattern]
    ref = reference(shape[0], pattern, offset, multiplier).reshape(shape)

    def body(_):
        return nisa.iota(sbuf(shape, dtype), pattern=pattern, offset=offset, channel_multiplier=multiplier)
    out, = run_isa(body, rand(1, 1))
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, ref.astype(dtype))


def test_iota_pattern_positional_and_defaults():
    out, = run_isa(lambda _: nisa.iota(sbuf((4, 6), nl.int32), [[2, 6]]), rand(1, 1))
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(6) * 2, (4, 6)))


def test_iota_pattern_int32_wraps():
    out, = run_isa(lambda _: nisa.iota(sbuf((2, 2), nl.int32), [[1, 2]], offset=2**31 - 1, channel_multiplier=2),
                   rand(1, 1))
    ref = (np.int64(2**31 - 1) + np.arange(2)[:, None] * 2 + np.arange(2)[None, :]).astype(np.uint32)
    np.testing.assert_array_equal(out, ref.view(np.int32))


def test_iota_pattern_into_a_view():
    def body(_):
        out = sbuf((8, 12), nl.float32)
        nisa.memset(out, -1.0)
        nisa.iota(out[:, 4:10], pattern=[[1, 6]], offset=100, channel_multiplier=10)
        return out
    out, = run_isa(body, rand(1, 1))
    ref = np.full((8, 12), -1.0, np.float32)
    ref[:, 4:10] = 100 + np.arange(8)[:, None] * 10 + np.arange(6)[None, :]
    np.testing.assert_array_equal(out, ref)


def test_iota_pattern_costs_gpsimd():
    def kernel(x):
        t = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.iota(t, pattern=[[1, 32]], channel_multiplier=32)
        nisa.dma_copy(dst=x, src=t)
    x = np.zeros((128, 32), np.float32)
    nki.simulate(kernel)(x)
    np.testing.assert_array_equal(x, np.arange(128 * 32).reshape(128, 32))
    report = nki.simulator.last_report()
    assert [(r.engine, r.shape) for r in report.instructions if r.opcode == "iota"] == [("GpSimd", (128, 32))]


def test_iota_expression_form_still_works():
    i_p, i_f = nl.arange(16)[:, None], nl.arange(8)[None, :]
    for call in (lambda d: nisa.iota(d, i_p * 8 + i_f), lambda d: nisa.iota(d, expr=i_p * 8 + i_f)):
        out, = run_isa(lambda _, call=call: call(sbuf((16, 8), nl.int32)), rand(1, 1))
        np.testing.assert_array_equal(out, np.arange(128).reshape(16, 8))


def test_iota_rule_pattern_size():
    def body(_):
        nisa.iota(sbuf((8, 8), nl.int32), pattern=[[1, 4]])  # <- rule
    expect_isa_rule(body, [rand(1, 1)], "affine-pattern")


def test_iota_rule_pattern_too_many_pairs():
    def body(_):
        nisa.iota(sbuf((2, 32), nl.int32), pattern=[[1, 2]] * 5)  # <- rule
    expect_isa_rule(body, [rand(1, 1)], "affine-pattern")


def test_iota_rule_pattern_not_pairs():
    def body(_):
        nisa.iota(sbuf((2, 4), nl.int32), pattern=[1, 4])  # <- rule
    expect_isa_rule(body, [rand(1, 1)], "affine-pattern")


def test_iota_rule_dst_in_sbuf():
    def body(_):
        nisa.iota(nl.ndarray((2, 4), nl.float32, buffer=nl.psum), pattern=[[1, 4]])  # <- rule
    expect_isa_rule(body, [rand(1, 1)], "dst-buffer")


def test_iota_rule_missing_pattern():
    def body(_):
        nisa.iota(sbuf((2, 4), nl.int32))  # <- rule
    err = expect_isa_rule(body, [rand(1, 1)], "dst")
    assert "needs pattern" in str(err)


def test_iota_rule_expression_with_pattern_arguments():
    def body(_):
        nisa.iota(sbuf((2, 4), nl.int32), nl.arange(2)[:, None] + nl.arange(4)[None, :], offset=3)  # <- rule
    expect_isa_rule(body, [rand(1, 1)], "iota-form")
