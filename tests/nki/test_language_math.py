"""The nki.language math of SDK 2.30+ (activations and derivatives, rounding, remainders, bitwise,
var / all, rms_norm, keepdims) against numpy / torch references, over dtypes and edge shapes."""
import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule

F32 = np.float32
RNG = np.random.default_rng(7)
BF16 = ml_dtypes.bfloat16


def rand(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, shape).astype(F32)


def t(x):
    return torch.from_numpy(np.asarray(x, F32)).requires_grad_()


def grad(fn, x):
    """d fn / dx elementwise, by torch autograd (an independent reference for the *_dx functions)."""
    xt = t(x)
    fn(xt).sum().backward()
    return xt.grad.numpy()


UNARY = {
    "tan": lambda x: np.tan(x / 3), "arctan": np.arctan, "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc,
    "mish": lambda x: torch.nn.functional.mish(t(x)).detach().numpy(),
    "gelu_apprx_sigmoid": lambda x: x / (1 + np.exp(-1.702 * x)),
    "gelu_dx": lambda x: grad(lambda v: torch.nn.functional.gelu(v), x),
    "gelu_apprx_sigmoid_dx": lambda x: grad(lambda v: v * torch.sigmoid(1.702 * v), x),
    "silu_dx": lambda x: grad(torch.nn.functional.silu, x),
    "erf_dx": lambda x: grad(torch.erf, x),
}
ARGS = {"tan": lambda x: x / 3}  # keep tan away from its poles


def run(fn, *arrays, out_dtype=None, hardware="trn2", out_shape=None):
    @nki.jit
    def k(*args):
        *ins, out = args
        res = fn(*(nl.load(a) for a in ins))
        nl.store(out, value=res)
        return out
    out = np.zeros(out_shape or np.broadcast_shapes(*(a.shape for a in arrays)), out_dtype or arrays[0].dtype)
    return nki.simulate(k, hardware=hardware)(*arrays, out)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(128, 64), (37, 1), (5, 3, 7)])
def test_unary_vs_reference(name, shape):
    x = rand(*shape)
    got = run(lambda v: getattr(nl, name)(ARGS.get(name, lambda a: a)(v)), x)
    np.testing.assert_allclose(got, UNARY[name](x), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["mish", "gelu_dx", "floor"])
def test_unary_rounds_to_bf16(name):
    x = rand(64, 32).astype(BF16)
    got = run(getattr(nl, name), x)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, UNARY[name](x.astype(F32)).astype(BF16))


@pytest.mark.parametrize("name", ["gelu_dx", "silu_dx", "mish", "erf_dx", "gelu_apprx_sigmoid", "arctan"])
def test_activation_table_ops_on_scalar_engine(name):
    x = rand(128, 16)

    @nki.jit
    def k(x, out):
        src = nl.load(x)
        dst = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=dst, op=getattr(nl, name), data=src, scale=0.5, bias=0.25)
        nl.store(out, value=dst)
        return out
    got = nki.simulate(k)(x, np.zeros_like(x))
    np.testing.assert_allclose(got, UNARY[name](x * 0.5 + 0.25), rtol=2e-5, atol=2e-6)
    assert nki.simulator.last_report().opcode_counts[f"ScalarE.activation[{name}]"] == 1


@pytest.mark.parametrize("dtype", [F32, np.int32])
def test_fmod_mod_average(dtype):
    a = (rand(96, 40) * 4).astype(dtype)
    b = np.where(np.abs(rand(96, 40)) < 0.5, 1.5, rand(96, 40)).astype(dtype)
    b[b == 0] = 3
    np.testing.assert_allclose(run(nl.fmod, a, b), np.fmod(a, b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run(nl.mod, a, b), np.mod(a, b), rtol=1e-6, atol=1e-5)
    mean = (a.astype(F32) + b) / 2  # computed in fp32, rounded to the operands' dtype (nearest for ints)
    np.testing.assert_allclose(run(nl.average, a, b), mean if dtype == F32 else np.rint(mean), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16])
def test_bitwise_ops(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -1000), min(info.max, 1000), (128, 33)).astype(dtype)
    b = RNG.integers(0, 5, (128, 33)).astype(dtype)
    for name, ref in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                      ("bitwise_xor", np.bitwise_xor), ("left_shift", np.left_shift),
                      ("right_shift", np.right_shift)]:
        np.testing.assert_array_equal(run(getattr(nl, name), a, b), ref(a, b), err_msg=name)
    np.testing.assert_array_equal(run(nl.invert, a), np.invert(a))


def test_logical_ops_prelu_bypass():
    a, b = rand(64, 20), rand(64, 20)
    np.testing.assert_array_equal(run(nl.logical_xor, a > 0, b > 0), np.logical_xor(a > 0, b > 0))
    np.testing.assert_array_equal(run(nl.logical_not, a > 0), a <= 0)
    np.testing.assert_allclose(run(lambda x: nl.prelu(x, 0.1), a), np.where(a > 0, a, 0.1 * a), rtol=1e-6)
    np.testing.assert_array_equal(run(nl.bypass, a), a)


def test_abs_max_abs_min_on_trn3():
    a, b = rand(128, 8), rand(128, 8)
    np.testing.assert_array_equal(run(nl.abs_max, a, b, hardware="trn3"), np.maximum(np.abs(a), np.abs(b)))
    np.testing.assert_array_equal(run(nl.abs_min, a, b, hardware="trn3"), np.minimum(np.abs(a), np.abs(b)))


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("name, ref", [("var", np.var), ("sum", np.sum), ("max", np.max), ("min", np.min),
                                       ("mean", np.mean), ("prod", np.prod), ("all", np.all)])
@pytest.mark.parametrize("shape, axis", [((128, 512), 1), ((40, 6, 5), (1, 2)), ((7, 1), 1)])
def test_reductions_keepdims(name, ref, shape, axis):
    x = rand(*shape, low=0.5, high=1.5) if name != "all" else (rand(*shape) > -2.5).astype(F32)
    reduce = getattr(nl, name)
    for keepdims in (True, False):
        expected = ref(x, axis=axis, keepdims=keepdims)
        got = run(lambda v: reduce(v, axis=axis, keepdims=keepdims), x, out_dtype=F32, out_shape=expected.shape)
        np.testing.assert_allclose(got, expected, rtol=2e-5)


@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_result_combines_with_its_input(keepdims):
    x = rand(128, 512)
    got = run(lambda v: v * nl.rsqrt(nl.mean(v * v, axis=1, keepdims=keepdims)), x)
    np.testing.assert_allclose(got, x / np.sqrt(np.mean(x * x, axis=1, keepdims=True)), rtol=2e-5)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("parts", [128, 17])
def test_rms_norm(dtype, parts):
    x, w = rand(parts, 96).astype(dtype), rand(parts, 96).astype(dtype)
    xf, wf = x.astype(F32), w.astype(F32)
    expected = xf / np.sqrt(np.sum(xf * xf, axis=1, keepdims=True) / 96 + 1e-6) * wf
    got = run(lambda a, b: nl.rms_norm(a, b, axis=1, n=96), x, w)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(F32), expected, rtol=2e-5 if dtype == F32 else 1e-2, atol=1e-5)


# ----------------------------------------------------------------------------- rules
def test_bitwise_needs_integer_tiles():
    @nki.jit
    def k(x):
        nl.bitwise_and(nl.load(x), 3)  # <- rule
    expect_rule(k, [rand(4, 4)], "bitwise-dtype")


def test_abs_max_needs_trn3():
    @nki.jit
    def k(x):
        nl.abs_max(nl.load(x), 1.0)  # <- rule
    expect_rule(k, [rand(4, 4)], "nc-version")
