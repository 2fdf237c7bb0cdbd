"""nki.language / nki.isa functions against numpy, dtype rounding, grids and torch interop."""
import threading

import ml_dtypes
import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa
from helpers_nki import expect_rule

F32 = np.float32
RNG = np.random.default_rng(0)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape).astype(F32)


def erf(x):
    return torch.erf(torch.from_numpy(x)).numpy()


UNARY = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "silu": lambda x: x / (1 + np.exp(-x)), "abs": np.abs, "negative": np.negative,
    "reciprocal": lambda x: 1 / x, "square": np.square,
}
BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power,
}


def run_unary(fn, x, **kw):
    @nki.jit
    def k(x, out):
        nl.store(out, value=fn(nl.load(x), **kw))
        return out
    return nki.simulate(k)(x, np.zeros(x.shape, kw.get("dtype", x.dtype)))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_vs_numpy(name):
    x = rand(128, 64, low=0.1, high=3.0) if name in ("log", "sqrt", "rsqrt") else rand(128, 64)
    np.testing.assert_allclose(run_unary(getattr(nl, name), x), UNARY[name](x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_vs_numpy(name):
    a, b = rand(64, 32, low=0.5), rand(64, 32, low=0.5)

    @nki.jit
    def k(a, b, out, out_s):
        ta, tb = nl.load(a), nl.load(b)
        nl.store(out, value=getattr(nl, name)(ta, tb))
        nl.store(out_s, value=getattr(nl, name)(ta, 1.5))
        return out, out_s
    out, out_s = nki.simulate(k)(a, b, np.zeros_like(a), np.zeros_like(a))
    np.testing.assert_allclose(out, BINARY[name](a, b), rtol=1e-6)
    np.testing.assert_allclose(out_s, BINARY[name](a, F32(1.5)), rtol=1e-6)


def test_python_operators():
    a, b = rand(32, 16, low=0.5), rand(32, 16, low=0.5)

    @nki.jit
    def k(a, b, out):
        x, y = nl.load(a), nl.load(b)
        r = (x + y) * 2.0 - y / x
        r = -r + (1.0 - x) + (3.0 * y) + (2.0 / y)
        r += x
        r *= 0.5
        nl.store(out, value=r)
        return out
    expected = (-((a + b) * 2 - b / a) + (1 - a) + 3 * b + 2 / b + a) * 0.5
    np.testing.assert_allclose(nki.simulate(k)(a, b, np.zeros_like(a)), expected, rtol=1e-5)


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(name, ref, keepdims):
    x = rand(128, 8, 16)

    @nki.jit
    def k(x):
        r = getattr(nl, name)(nl.load(x), axis=(1, 2), keepdims=keepdims)
        out = nl.ndarray(r.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=r)
        return out
    np.testing.assert_allclose(nki.simulate(k)(x), ref(x, axis=(1, 2), keepdims=keepdims), rtol=1e-5)


def test_where_and_comparisons():
    x = rand(128, 128)

    @nki.jit
    def k(x, out, out2):
        t = nl.load(x)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
        nl.store(out, value=nl.where(i_p >= i_f, t, -1.0))
        nl.store(out2, value=nl.where(t > 0.0, t, 0.0))
        return out, out2
    out, out2 = nki.simulate(k)(x, np.zeros_like(x), np.zeros_like(x))
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((128, 128), bool)), x, -1))
    np.testing.assert_array_equal(out2, np.maximum(x, 0))


def test_softmax_nl():
    x = rand(100, 300)

    @nki.jit
    def k(x, out):
        nl.store(out, value=nl.softmax(nl.load(x), axis=1))
        return out
    ref = torch.softmax(torch.from_numpy(x), 1).numpy()
    np.testing.assert_allclose(nki.simulate(k)(x, np.zeros_like(x)), ref, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_matmul_and_transpose(dtype):
    a, b = rand(96, 64).astype(dtype), rand(64, 200).astype(dtype)

    @nki.jit
    def k(a, b, out, out_t):
        ta, tb = nl.load(a), nl.load(b)
        nl.store(out, value=nl.copy(nl.matmul(ta, tb), dtype=nl.float32))
        at = nl.transpose(ta)
        assert at.buffer == nl.psum
        nl.store(out_t, value=nl.copy(at))
        # transpose_x=True: x is already [K, M]
        r = nl.matmul(nl.copy(at), tb, transpose_x=True)
        nl.store(out, value=nl.copy(r))
        return out, out_t
    out, out_t = nki.simulate(k)(a, b, np.zeros((96, 200), F32), np.zeros((64, 96), dtype))
    np.testing.assert_allclose(out, a.astype(F32) @ b.astype(F32), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(out_t, a.T)


def _check_isa_outputs(x, b, outs):
    np.testing.assert_allclose(outs[0], np.exp(x * 0.5 + b), rtol=1e-6)
    np.testing.assert_allclose(outs[1], x * x)
    np.testing.assert_allclose(outs[2], x * b + 2.0, rtol=1e-6)
    np.testing.assert_array_equal(outs[3], x.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(outs[4], x.astype(ml_dtypes.bfloat16).astype(F32))
    np.testing.assert_array_equal(outs[5], np.arange(128 * 64).reshape(128, 64))
    np.testing.assert_array_equal(outs[6][64:], 3.0)
    np.testing.assert_array_equal(outs[6][:64], x[64:])


def _isa_outs():
    outs = [np.zeros((128, 64), F32) for _ in range(7)]
    outs[3] = np.zeros((128, 1), F32)
    outs[5] = np.zeros((128, 64), np.int32)
    return outs


def test_isa_functions_write_their_destination():
    x, b = rand(128, 64), rand(128, 1)

    @nki.jit
    def k(x, b, o1, o2, o3, o4, o5, o6, o7):
        t, tb = nl.ndarray((128, 64), nl.float32), nl.ndarray((128, 1), nl.float32)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(tb, b)
        results = [nl.ndarray((128, 64), d) for d in (nl.float32,) * 3 + (nl.float32, nl.bfloat16, nl.int32,
                                                                            nl.float32)]
        results[3] = nl.ndarray((128, 1), nl.float32)
        assert nisa.activation(results[0], nl.exp, t, bias=tb, scale=0.5) is results[0]
        nisa.tensor_tensor(dst=results[1], data1=t, data2=t, op=np.multiply)
        nisa.tensor_scalar(results[2], t, nl.multiply, tb, op1=np.add, operand1=2.0)
        nisa.tensor_reduce(results[3], np.max, t, axis=1, keepdims=True)
        nisa.tensor_copy(dst=results[4], src=t)  # rounds to the destination's bf16
        nisa.iota(results[5], nl.arange(128)[:, None] * 64 + nl.arange(64)[None, :])
        nisa.memset(dst=results[6], value=3.0)
        for out, r in zip((o1, o2, o3, o4, o5, o6, o7), results):
            nisa.dma_copy(dst=out, src=r)
        nisa.dma_copy(dst=o7[0:64, :], src=x[64:128, :])
    outs = _isa_outs()
    nki.simulate(k)(x, b, *outs)
    _check_isa_outputs(x, b, outs)


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_nc_matmul_is_transpose_transposes_the_stationary_tile_through_an_identity(dtype):
    x = rand(32, 5)

    @nki.jit
    def k(x, out):
        s = nl.ndarray((32, 5), dtype)
        nisa.dma_copy(dst=s, src=x)
        t = nl.ndarray((5, 32), dtype, buffer=nl.psum)
        t[...] = 7.0  # overwritten, not accumulated
        assert nisa.nc_matmul(t, s, nl.shared_identity_matrix(32, dtype=dtype), is_transpose=True) is t
        nisa.dma_copy(dst=out, src=t)
        return out
    out = nki.simulate(k)(x, np.zeros((5, 32), F32))
    np.testing.assert_array_equal(out, x.astype(dtype).astype(F32).T)


def test_legacy_isa_functions_return_new_tiles():
    x, b = rand(128, 64), rand(128, 1)

    @nki.jit
    def k(x, b, o1, o2, o3, o4, o5, o6, o7):
        t, tb = nl.load(x), nl.load(b)
        nl.store(o1, value=legacy_isa.activation(nl.exp, t, bias=tb, scale=0.5))
        nl.store(o2, value=legacy_isa.tensor_tensor(t, t, np.multiply))
        nl.store(o3, value=legacy_isa.tensor_scalar(t, nl.multiply, tb, op1=np.add, operand1=2.0))
        nl.store(o4, value=legacy_isa.tensor_reduce(np.max, t, axis=1, keepdims=True))
        nl.store(o5, value=legacy_isa.tensor_copy(t, dtype=nl.bfloat16))
        nl.store(o6, value=legacy_isa.iota(nl.arange(128)[:, None] * 64 + nl.arange(64)[None, :], nl.int32))
        nl.store(o7, value=legacy_isa.memset((128, 64), 3.0, nl.float32))
        legacy_isa.dma_copy(dst=o7[0:64, :], src=x[64:128, :])
    outs = _isa_outs()
    nki.simulate(k)(x, b, *outs)
    _check_isa_outputs(x, b, outs)


def test_psum_accumulation_and_sbuf_views():
    a, b = rand(256, 64), rand(256, 32)

    @nki.jit
    def k(a, b, out):
        acc = nl.zeros((64, 32), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(2):
            acc[...] += legacy_isa.nc_matmul(nl.load(a[nl.ds(i * 128, 128), :]),
                                       nl.load(b[nl.ds(i * 128, 128), :]))
        res = nl.ndarray((64, 32), nl.float32)
        res[...] = nl.copy(acc)
        res[0:32, 0:16] = nl.multiply(res[0:32, 0:16], 0.0)
        nl.store(out, value=res)
        return out
    out = nki.simulate(k)(a, b, np.zeros((64, 32), F32))
    expected = a.T @ b
    expected[0:32, 0:16] = 0
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
    report = nki.simulator.last_report()
    assert report.opcode_counts["TensorE.matmul"] == 2
    assert report.opcode_counts.get("VectorE.tensor_tensor[add]", 0) == 0  # accumulation is free


def test_index_expressions_and_mgrid():
    x = rand(256, 64)

    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(32)[None, :]
        g = nl.mgrid[0:128, 0:32]
        t = nl.load(x[128 + i_p, 2 * i_f])
        nl.store(out[g.p, g.x], value=t)
        nl.store(out[i_p, 32 + i_f], value=nl.load(x[0:128, 5:37]))
        return out
    out = nki.simulate(k)(x, np.zeros((128, 64), F32))
    np.testing.assert_array_equal(out[:, :32], x[128:, 0:64:2])
    np.testing.assert_array_equal(out[:, 32:], x[:128, 5:37])


@pytest.mark.parametrize("name", ["exp", "sin", "tanh", "silu", "add", "multiply", "divide"])
def test_bf16_rounding_matches_torch(name):
    x, y = rand(128, 256), rand(128, 256, low=0.5)

    @nki.jit
    def k(x, y, out):
        tx, ty = nl.load(x), nl.load(y)
        fn = getattr(nl, name)
        r = fn(tx, ty, dtype=nl.bfloat16) if name in BINARY else fn(tx, dtype=nl.bfloat16)
        assert r.dtype == nl.bfloat16
        nl.store(out, value=r)
        return out
    out = nki.simulate(k)(x, y, np.zeros((128, 256), ml_dtypes.bfloat16))
    fp32 = BINARY[name](x, y) if name in BINARY else (UNARY[name](x) if name in UNARY else np.tanh(x))
    expected = torch.from_numpy(np.ascontiguousarray(fp32, F32)).to(torch.bfloat16)
    got = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    assert torch.equal(got, expected)


def test_bf16_tiles_round_intermediates_unless_fp32_compute():
    x = rand(128, 64)

    @nki.jit
    def k(x, out):
        t = nl.load(x, dtype=nl.bfloat16)
        nl.store(out, value=nl.add(t, 0.0, dtype=nl.float32))
        return out
    out = nki.simulate(k)(x, np.zeros_like(x))
    np.testing.assert_array_equal(out, x.astype(ml_dtypes.bfloat16).astype(F32))
    fast = nki.simulate(k, fp32_compute=True)(x, np.zeros_like(x))
    np.testing.assert_array_equal(fast, x)


@pytest.mark.parametrize("dtype", [nl.float16, nl.float8_e4m3, nl.float8_e5m2, nl.int8, nl.uint16, nl.int32])
def test_store_rounds_to_dtype(dtype):
    x = rand(16, 16, low=-3, high=3)

    @nki.jit
    def k(x, out):
        nl.store(out, value=nl.load(x))
        return out
    out = nki.simulate(k)(x, np.zeros((16, 16), dtype))
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        np.testing.assert_array_equal(out, np.clip(np.rint(x), info.min, info.max).astype(dtype))
    else:
        np.testing.assert_array_equal(out, x.astype(dtype))


def test_grid_program_id():
    @nki.jit
    def k(out):
        i, j = nl.program_id(0), nl.program_id(1)
        nl.store(out[i, j], value=nl.full((1,), i * 10 + j + 100 * nl.num_programs(0), nl.float32))
        return out
    out = k[2, 3](np.zeros((2, 3, 1), F32))
    np.testing.assert_array_equal(out[..., 0], [[200, 201, 202], [210, 211, 212]])
    assert nki.simulator.last_report().grid == (2, 3)
    assert nki.simulate(k)[4](np.zeros((4, 1, 1), F32))[:, 0, 0].tolist() == [400, 410, 420, 430]


def test_grid_shared_hbm_output_is_shared():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        p = nl.program_id(0)
        nl.store(out[nl.ds(p * 128, 128)], value=nl.exp(nl.load(x[nl.ds(p * 128, 128)])))
        return out
    x = rand(512, 4)
    np.testing.assert_allclose(k[4](x), np.exp(x), rtol=1e-6)


def test_kernel_writes_cpu_torch_tensor_in_place():
    @nki.jit
    def k(x, out):
        nl.store(out, value=nl.multiply(nl.load(x), 3.0))
        return out
    x = torch.randn(128, 16)
    out = torch.zeros(128, 16)
    assert k(x, out) is out
    torch.testing.assert_close(out, x * 3)
    xb, ob = x.bfloat16(), torch.zeros(128, 16, dtype=torch.bfloat16)
    k(xb, ob)
    assert torch.equal(ob, (xb.float() * 3).bfloat16())


def test_kernel_returns_new_torch_tensor():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out
    x = torch.randn(64, 8, dtype=torch.bfloat16)
    r = k(x)
    assert isinstance(r, torch.Tensor) and r.dtype == torch.bfloat16
    assert torch.equal(r, x.float().exp().bfloat16())


def test_spec_sin_cos_kernels_on_numpy():
    @nki.jit
    def sin_kernel(x, out):
        t = nl.load(x[0:128]); nl.store(out[0:128], value=nl.sin(t)); return out  # noqa: E702

    @nki.jit
    def cos_kernel(x, out):
        t = nl.load(x[0:128]); nl.store(out[0:128], value=nl.cos(t)); return out  # noqa: E702

    x = rand(128, 1)
    np.testing.assert_allclose(nki.simulate(sin_kernel)(x, np.empty_like(x)), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(cos_kernel(x, np.empty_like(x)), np.cos(x), rtol=1e-6)
    xt = torch.from_numpy(x)
    out = torch.empty_like(xt)
    sin_kernel(xt, out)
    torch.testing.assert_close(out, xt.sin())


def test_device_tensors_go_to_their_device_types_launcher(monkeypatch):
    import nki.launchers
    monkeypatch.setattr(nki.launchers, "device_launchers", {})

    class OtherDevice:
        type = "other"

        def __str__(self):
            return "other:0"

    class OtherTensor(torch.Tensor):
        @property
        def device(self):
            return OtherDevice()

    t = torch.zeros(4).as_subclass(OtherTensor)

    @nki.jit
    def k(x):
        return x
    with pytest.raises(RuntimeError, match=r"kernel called with other:0 tensors but no launcher is "
                                           r"registered for 'other' devices"):
        k(t)
    calls = []
    nki.launchers.device_launchers["other"] = (
        lambda kernel, args, kwargs, grid: calls.append((kernel, args, kwargs, grid)) or "ran")
    assert k[2](t, scale=1.0) == "ran"
    assert calls[0][0] is k and calls[0][1][0] is t and calls[0][2] == {"scale": 1.0} and calls[0][3] == (2,)


def test_run_from_threads_is_isolated():
    @nki.jit
    def k(x, out, n):
        for _ in nl.affine_range(n):
            nl.store(out, value=nl.add(nl.load(x), 1.0))
        return out

    results = {}

    def worker(n):
        x = np.full((128, 8), n, F32)
        out, report = nki.simulator.run(k, [x, np.zeros_like(x), n], {})
        results[n] = (out[0, 0], report.instruction_count, nki.simulator.last_report() is report)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(1, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {n: (n + 1, 3 * n, True) for n in range(1, 6)}


def test_a_row_tile_stores_into_a_row_of_hbm_selected_by_an_integer():
    # [1, F] into out[0, :] (shape (F,)): the shapes differ only by a unit axis, no element moves
    x = rand(1, 64)

    @nki.jit
    def k(x, out):
        nl.store(out[0, :], value=nl.load(x))
        return out
    out = nki.simulate(k)(x, np.zeros((2, 64), F32))
    np.testing.assert_array_equal(out[0], x[0])
    np.testing.assert_array_equal(out[1], 0)


@pytest.mark.parametrize("axis,dims", [(1, (2,)), (2, (2,)), ([1, 2], (1, 2)), ((2, 1), (1, 2)), (-1, (2,))])
def test_tensor_reduce_axes_are_the_last_free_dims_in_either_published_spelling(axis, dims):
    # the last dims given as dims ((2,) of a 3-d tile) or counted from the most minor one (1 = last)
    x = rand(16, 5, 6)

    @nki.jit
    def k(x, out, legacy_out):
        t = nl.load(x)
        r = nl.ndarray(out.shape, nl.float32)
        nisa.tensor_reduce(r, nl.maximum, t, axis=axis)
        nisa.dma_copy(dst=out, src=r)
        nl.store(legacy_out, value=legacy_isa.tensor_reduce(nl.maximum, t, axis=axis))
    shape = tuple(n for d, n in enumerate(x.shape) if d not in dims)
    out, legacy_out = np.zeros(shape, F32), np.zeros(shape, F32)
    nki.simulate(k)(x, out, legacy_out)
    np.testing.assert_array_equal(out, x.max(axis=dims))
    np.testing.assert_array_equal(legacy_out, x.max(axis=dims))


def test_tensor_reduce_axes_that_are_not_the_last_free_dims_are_a_rule():
    @nki.jit
    def k():
        t = nl.zeros((16, 2, 3, 4), nl.float32)
        nisa.tensor_reduce(nl.ndarray((16, 3), nl.float32), nl.add, t, axis=(1, 3))  # <- rule
    expect_rule(k, [], "reduce-free-axis")
