"""nki.isa tensor_tensor_scan / tensor_scalar_cumulative against sequential numpy references."""
import ml_dtypes
import numpy as np
import pytest
from isa_helpers import expect_isa_rule, rand, run_isa, sbuf

import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa

BF16 = ml_dtypes.bfloat16
OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
       "minimum": np.minimum}


def scan_reference(d0, d1, initial, op0, op1, reverse0=False, reverse1=False):
    d0, d1 = d0.astype(np.float32), d1.astype(np.float32)
    out = np.empty_like(d0)
    state = np.broadcast_to(np.float32(initial) if np.isscalar(initial) else initial[:, 0], d0.shape[:1])
    for i in range(d0.shape[1]):
        step = op0(state, d0[:, i]) if reverse0 else op0(d0[:, i], state)
        state = out[:, i] = op1(d1[:, i], step) if reverse1 else op1(step, d1[:, i])
    return out


@pytest.mark.parametrize("op0,op1,reverse0,reverse1", [("multiply", "add", False, False),
                                                       ("add", "add", False, False),
                                                       ("subtract", "maximum", True, False),
                                                       ("maximum", "subtract", False, True)])
@pytest.mark.parametrize("shape", [(128, 64), (7, 1)])
def test_tensor_tensor_scan(op0, op1, reverse0, reverse1, shape):
    d0, d1, init = rand(*shape, low=0.5, high=1.0), rand(*shape), rand(shape[0], 1)

    def body(a, b, i):
        return nisa.tensor_tensor_scan(sbuf(shape, nl.float32), a, b, i, getattr(nl, op0), getattr(np, op1),
                                       reverse0=reverse0, reverse1=reverse1)
    out, = run_isa(body, d0, d1, init)
    np.testing.assert_allclose(out, scan_reference(d0, d1, init, OPS[op0], OPS[op1], reverse0, reverse1),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op0,identity,op1", [("multiply", 1.0, "add"), ("add", 0.0, "maximum"),
                                              ("multiply", 1.0, "subtract")])
def test_a_scan_that_passes_the_running_value_through_is_bit_identical_to_the_sequential_one(op0, identity, op1):
    # data0 all identity: the simulator takes one vectorised left fold (a cumsum) instead of stepping
    d1, init = rand(128, 300), rand(128, 1)
    d0 = np.full_like(d1, identity)

    def body(a, b, i):
        return nisa.tensor_tensor_scan(sbuf(d1.shape, nl.float32), a, b, i, getattr(nl, op0), getattr(nl, op1))
    out, = run_isa(body, d0, d1, init)
    np.testing.assert_array_equal(out, scan_reference(d0, d1, init, OPS[op0], OPS[op1]))


def test_legacy_tensor_tensor_scan_bf16_scalar_initial():
    d0, d1 = rand(32, 40, low=0.5, high=1.0, dtype=BF16), rand(32, 40, dtype=BF16)
    out, = run_isa(lambda a, b: legacy_isa.tensor_tensor_scan(a, b, 0.25, np.multiply, np.add), d0, d1)
    assert out.dtype == BF16
    ref = scan_reference(d0, d1, 0.25, np.multiply, np.add).astype(BF16)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_tensor_tensor_scan_rule_layout():
    def body(a, b):
        nisa.tensor_tensor_scan(sbuf((16, 8), nl.float32), a, b, 0.0, nl.add, nl.add)  # <- rule
    expect_isa_rule(body, [rand(16, 8), rand(16, 4)], "shape-mismatch")


def cumulative_reference(src, op0, imm0, op1, start):
    reg = start.astype(np.float32).copy()
    out = np.empty(src.shape, np.float32)
    for i in range(src.shape[1]):
        reg = OPS[op1](OPS[op0](src[:, i].astype(np.float32), imm0), reg)
        out[:, i] = reg
    return out


IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


@pytest.mark.parametrize("op1", sorted(IDENTITY))
@pytest.mark.parametrize("shape", [(128, 33), (5, 1)])
def test_tensor_scalar_cumulative_reset_reduce(op1, shape):
    src = rand(*shape, low=0.6, high=1.2)

    def body(s):
        return nisa.tensor_scalar_cumulative(sbuf(shape, nl.float32), s, nl.multiply, getattr(nl, op1), 1.5)
    out, = run_isa(body, src)
    ref = cumulative_reference(src, "multiply", np.float32(1.5), op1, np.full(shape[0], IDENTITY[op1]))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_tensor_scalar_cumulative_chains_through_registers_and_load_reduce():
    a, b, start = rand(64, 16), rand(64, 16), rand(64, 1)

    def body(x, y, s):
        first = nisa.tensor_scalar_cumulative(sbuf((64, 16), nl.float32), x, nl.add, nl.add, 0.5,
                                              imm1=s, reduce_cmd=nisa.reduce_cmd.load_reduce)
        second = nisa.tensor_scalar_cumulative(sbuf((64, 16), nl.bfloat16), y, nl.subtract, nl.add, 1.0,
                                               reduce_cmd=nisa.reduce_cmd.reduce)
        return first, second
    first, second = run_isa(body, a, b, start)
    ref = np.cumsum(np.concatenate([a + 0.5, b - 1.0], axis=1), axis=1) + start
    np.testing.assert_allclose(first, ref[:, :16], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second.astype(np.float32), ref[:, 16:].astype(BF16).astype(np.float32))


def test_tensor_scalar_cumulative_rule_int32():
    def body(s):
        nisa.tensor_scalar_cumulative(sbuf((8, 4), nl.int32), s, nl.add, nl.add, 1.0)  # <- rule
    expect_isa_rule(body, [np.ones((8, 4), np.int32)], "dtype")


def test_tensor_scalar_cumulative_rule_op1():
    def body(s):
        nisa.tensor_scalar_cumulative(sbuf((8, 4), nl.float32), s, nl.add, nl.divide, 1.0)  # <- rule
    expect_isa_rule(body, [rand(8, 4)], "unsupported-op")
