"""nki.isa activate2 / exponential / reciprocal / scalar_tensor_tensor / tensor_scalar_reduce and the
engines' reduction registers, against numpy."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa

BF16 = ml_dtypes.bfloat16
TRN3 = {"hardware": "trn3"}


@pytest.mark.parametrize("op0,op1,ref", [
    (nl.multiply, nl.add, lambda x, a, b: x * a + b), (nl.multiply, nl.subtract, lambda x, a, b: x * a - b),
    ("bypass", "bypass", lambda x, a, b: x), (nl.subtract, "bypass", lambda x, a, b: x - a)])
def test_activate2_pipeline_and_sum_register(op0, op1, ref):
    x, scale = rand(128, 48), rand(128, 1)

    def body(t, s):
        out, total = sbuf((128, 48), nl.float32), sbuf((128, 1), nl.float32)
        nisa.activate2(out, nl.exp, t, imm0=s, imm1=0.5, op0=op0, op1=op1, reduce_op=nl.add, reduce_res=total,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
        return out, total
    out, total = run_isa(body, x, scale, **TRN3)
    expected = np.exp(ref(x, scale, np.float32(0.5)))
    np.testing.assert_allclose(out, expected, rtol=2e-6)
    np.testing.assert_allclose(total[:, 0], expected.sum(axis=1), rtol=1e-5)


def test_activate2_abs_max_register_accumulates_and_reverse():
    a, b = rand(16, 8), rand(16, 8)

    def body(x, y):
        out, res = sbuf((16, 8), nl.bfloat16), sbuf((16, 1), nl.float32)
        nisa.activate2(out, "copy", x, 2.0, 1.0, nl.subtract, "bypass", reverse0=True, reduce_op="abs_max",
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activate2(out, "copy", y, 2.0, 1.0, nl.subtract, "bypass", reverse0=True, reduce_op="abs_max",
                       reduce_res=res, reduce_cmd=nisa.reduce_cmd.reduce)
        return out, res
    out, res = run_isa(body, a, b, **TRN3)
    np.testing.assert_array_equal(out, (2.0 - b).astype(BF16))
    np.testing.assert_allclose(res[:, 0], np.abs(np.concatenate([2.0 - a, 2.0 - b], axis=1)).max(axis=1), rtol=1e-6)


def test_activate2_rule_generation():
    def body(t):
        nisa.activate2(sbuf((8, 4), nl.float32), nl.exp, t, 1.0, 0.0, nl.multiply, nl.add)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "nc-version")


def test_activate2_rule_step_combination():
    def body(t):
        nisa.activate2(sbuf((8, 4), nl.float32), nl.exp, t, 1.0, 0.0, nl.add, nl.multiply)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "unsupported-op", **TRN3)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_exponential_sums_into_vector_registers(dtype):
    x, m, init = rand(128, 40, dtype=dtype), rand(128, 1), rand(128, 1)

    def body(t, mx, i):
        out, res = sbuf((128, 40), t.dtype), sbuf((128, 1), nl.float32)
        nisa.exponential(out[:, 0:20], t[:, 0:20], max_value=mx, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=i)
        nisa.exponential(out[:, 20:40], t[:, 20:40], max_value=mx, reduce_res=res,
                         reduce_cmd=nisa.reduce_cmd.reduce)
        return out[:, 0:20], res
    head, res = run_isa(body, x, m, init, **TRN3)
    e = np.exp(x.astype(np.float32) - m)
    np.testing.assert_allclose(head.astype(np.float32), e[:, :20].astype(dtype).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(res[:, 0], init[:, 0] + e.sum(axis=1), rtol=1e-5)


def test_exponential_rule_reduce_init_without_load():
    def body(t):
        nisa.exponential(sbuf((8, 4), nl.float32), t, reduce_init=1.0)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "reduce-init", **TRN3)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_reciprocal(dtype):
    x = rand(100, 3, low=0.5, high=2.0, dtype=dtype)
    new, into = run_isa(lambda t: (legacy_isa.reciprocal(t), nisa.reciprocal(sbuf(t.shape, nl.float32), t)), x)
    np.testing.assert_allclose(into, 1.0 / x.astype(np.float32), rtol=1e-6)
    assert new.dtype == dtype


@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, True)])
def test_scalar_tensor_tensor(reverse0, reverse1):
    x, s, y = rand(128, 4, 8), rand(128, 1), rand(128, 4, 8)

    def body(a, b, c):
        return nisa.scalar_tensor_tensor(sbuf(a.shape, nl.float32), a, nl.subtract, b, nl.multiply, c,
                                         reverse0=reverse0, reverse1=reverse1)
    out, = run_isa(body, x, s, y)
    first = s[:, :, None] - x if reverse0 else x - s[:, :, None]
    np.testing.assert_allclose(out, y * first if reverse1 else first * y, rtol=1e-6)


def test_legacy_scalar_tensor_tensor_returns_tile():
    x, y = rand(16, 5, dtype=BF16), rand(16, 5)
    out, = run_isa(lambda a, c: legacy_isa.scalar_tensor_tensor(data=a, op0=nl.multiply, operand0=2.0,
                                                                  op1=nl.add, operand1=c), x, y)
    assert out.dtype == np.float32  # bf16 with fp32 promotes
    np.testing.assert_allclose(out, x.astype(np.float32) * 2 + y, rtol=1e-6)


@pytest.mark.parametrize("reduce_op,ref", [(nl.add, np.sum), (np.max, np.max), (nl.minimum, np.min),
                                           (nl.multiply, np.prod)])
def test_tensor_scalar_reduce(reduce_op, ref):
    x = rand(128, 16, low=0.5, high=1.5)

    def body(t):
        out, res = sbuf((128, 16), nl.float32), sbuf((128, 1), nl.float32)
        nisa.tensor_scalar_reduce(out, t, nl.multiply, 1.25, reduce_op, res)
        return out, res
    out, res = run_isa(body, x)
    np.testing.assert_allclose(out, x * np.float32(1.25), rtol=1e-6)
    np.testing.assert_allclose(res[:, 0], ref(x * np.float32(1.25), axis=1), rtol=1e-5)


def test_legacy_tensor_scalar_reduce_and_load_reduce():
    x, init = rand(32, 10), rand(32, 1)

    def body(t, i):
        res, res2 = sbuf((32, 1), nl.float32), sbuf((32, 1), nl.float32)
        out = legacy_isa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=res)
        nisa.tensor_scalar_reduce(sbuf((32, 10), nl.float32), t, nl.add, 1.0, nl.maximum, res2,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=i)
        return out, res, res2
    out, res, res2 = run_isa(body, x, init)
    np.testing.assert_allclose(res[:, 0], (x + 1).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(res2[:, 0], np.maximum(init[:, 0], (x + 1).max(axis=1)))


def test_tensor_scalar_reduce_rule_reduce_op():
    def body(t):
        res = sbuf((8, 1), nl.float32)
        nisa.tensor_scalar_reduce(sbuf((8, 4), nl.float32), t, nl.add, 1.0, nl.divide, res)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "unsupported-op")


def test_tensor_scalar_reduce_rule_load_without_init():
    def body(t):
        nisa.tensor_scalar_reduce(sbuf((8, 4), nl.float32), t, nl.add, 1.0, nl.add, None,  # <- rule
                                  reduce_cmd=nisa.reduce_cmd.load_reduce)
    expect_isa_rule(body, [rand(8, 4)], "reduce-init")
