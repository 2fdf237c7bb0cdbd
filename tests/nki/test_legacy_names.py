"""Names of the previous generation added for SDK 2.26-2.29 kernels: nl.finfo, `lazy_initialization=`
on the creation functions, and the instructions SDK 2.27-2.29 documented only in the destination form
(tensor_scalar_cumulative, ...) under `neuronxcc.nki.isa`."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as current_isa
import nki.legacy.isa as nisa
import nki.legacy.language as nl
from helpers_nki import expect_rule

F32 = np.float32
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("dtype,lo,hi,eps", [
    (nl.float32, -3.4028235e38, 3.4028235e38, 2.0 ** -23),
    (nl.bfloat16, -(2 - 2.0 ** -7) * 2.0 ** 127, (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -7),
    (nl.float16, -65504.0, 65504.0, 2.0 ** -10),
    (np.float32, -3.4028235e38, 3.4028235e38, 2.0 ** -23),
])
def test_finfo_matches_the_ieee_limits(dtype, lo, hi, eps):
    info = nl.finfo(dtype)
    assert (float(info.min), float(info.max), float(info.eps)) == pytest.approx((lo, hi, eps), rel=1e-7)


def test_finfo_min_fills_padding_as_in_kernels():
    def k(x):
        out = nl.ndarray((4, 6), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        pad = nl.full((4, 6), fill_value=nl.finfo(nl.bfloat16).min, dtype=nl.bfloat16)
        pad[:, 1:5] = nl.load(x)
        nl.store(out, value=pad)
        return out
    x = RNG.standard_normal((4, 4)).astype(ml_dtypes.bfloat16)
    got = np.asarray(nki.simulate(k)(x), F32)
    assert np.all(got[:, [0, 5]] == float(ml_dtypes.finfo(ml_dtypes.bfloat16).min))
    np.testing.assert_array_equal(got[:, 1:5], x.astype(F32))


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("buffer", ["sbuf", "psum"])
def test_lazy_initialization_is_accepted_and_has_no_effect(lazy, buffer):
    def k(x):
        out = nl.ndarray((3, 5, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        region = getattr(nl, buffer)
        tiles = [nl.full((5, 4), fill_value=2.5, dtype=nl.float32, buffer=region, lazy_initialization=lazy),
                 nl.zeros((nl.par_dim(5), 4), dtype=nl.float32, buffer=region, lazy_initialization=lazy),
                 nl.ndarray((2, nl.par_dim(5), 4), dtype=nl.float32, buffer=region, lazy_initialization=lazy)[1]]
        for i, t in enumerate(tiles):
            nl.store(out[i], value=nl.copy(t))
        return out
    got = nki.simulate(k)(np.zeros(1, F32))
    np.testing.assert_array_equal(got, np.stack([np.full((5, 4), 2.5, F32), np.zeros((5, 4), F32),
                                                 np.zeros((5, 4), F32)]))


def _cumulative(src, imm0, start):
    """Sequential reference: reg = (src[:, i] * imm0) + reg, out[:, i] = reg."""
    reg = np.asarray(start, F32).copy()
    out = np.empty(src.shape, F32)
    for i in range(src.shape[1]):
        reg = src[:, i].astype(F32) * np.float32(imm0) + reg
        out[:, i] = reg
    return out


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
@pytest.mark.parametrize("shape", [(128, 40), (5, 1)])
def test_legacy_tensor_scalar_cumulative_writes_dst(dtype, shape):
    src = RNG.uniform(-1, 1, shape).astype(F32)
    start = RNG.uniform(-1, 1, (shape[0], 1)).astype(F32)

    def k(s_hbm, start_hbm):
        out = nl.ndarray((2,) + shape, dtype=dtype, buffer=nl.shared_hbm)
        s, init = nl.load(s_hbm), nl.load(start_hbm)
        first = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        second = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        returned = nisa.tensor_scalar_cumulative(dst=first, src=s, op0=nl.multiply, op1=nl.add, imm0=2.0,
                                                 imm1=init, reduce_cmd=nisa.reduce_cmd.load_reduce)
        assert returned is first
        nisa.tensor_scalar_cumulative(dst=second, src=s, op0=nl.multiply, op1=nl.add, imm0=1.0,
                                      reduce_cmd=nisa.reduce_cmd.reduce)  # carries on from the register
        nl.store(out[0], value=first)
        nl.store(out[1], value=second)
        return out
    got = np.asarray(nki.simulate(k)(src, start), F32)
    first = _cumulative(src, 2.0, start[:, 0])
    second = _cumulative(src, 1.0, first[:, -1])
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == nl.float32 else dict(rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(got[0], first.astype(dtype).astype(F32), **tol)
    np.testing.assert_allclose(got[1], second.astype(dtype).astype(F32), **tol)


SDK_2_27_TO_2_29 = ["dma_compute", "exponential", "nc_matmul_mx", "nc_n_gather",
                    "nonzero_with_count", "quantize_mx", "rand2", "rand_get_state", "rand_set_state",
                    "register_alloc", "register_load", "register_move", "register_store", "rng",
                    "set_rng_seed", "tensor_scalar_cumulative"]


@pytest.mark.parametrize("name", SDK_2_27_TO_2_29)
def test_destination_form_instructions_are_exported(name):
    legacy = getattr(nisa, name)
    assert getattr(legacy, "__wrapped__", legacy) is getattr(current_isa, name)


def test_cross_core_instructions_of_sdk_2_27_to_2_29_do_not_warn():
    # nki.isa's spellings are deprecated in favour of nki.lnc; the previous generation's are not
    @nki.jit
    def swap(x, out):
        r = nl.program_id(0)
        t = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
        got = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
        current_isa.dma_copy(dst=t, src=x[r])
        nisa.sendrecv(src=t, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)
        nisa.core_barrier(out, (0, 1))
        current_isa.dma_copy(dst=out[r], src=got)
        return out
    x = np.arange(12, dtype=F32).reshape(2, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(nki.simulate(swap[2])(x, np.zeros_like(x)), x[::-1])


def test_dma_copy_read_modify_write_and_skip():
    x, acc = np.arange(24, dtype=F32).reshape(4, 6), np.ones((4, 6), F32)

    @nki.jit
    def k(x, acc):
        t = nl.load(x)
        nisa.dma_copy(acc, t, dst_rmw_op=nl.add)
        nisa.dma_copy(acc, t, dst_rmw_op=nl.add, mask=None)
        return acc
    np.testing.assert_array_equal(nki.simulate(k)(x, acc), 1 + 2 * np.arange(24, dtype=F32).reshape(4, 6))


def test_rule_dst_when_a_destination_only_instruction_misses_dst():
    def k(x):
        s = nl.load(x)
        return nisa.tensor_scalar_cumulative(src=s, op0=nl.multiply, op1=nl.add, imm0=1.0)  # <- rule
    expect_rule(k, [np.zeros((4, 4), F32)], "dst")
