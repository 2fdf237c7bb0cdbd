"""nki.isa.quantize_mx / nc_matmul_mx (MXFP8/MXFP4 on trn3) against an independent numpy reference."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule
from nki.simulator import cost_model as cm

RNG = np.random.default_rng(7)
ELEMENT = {"float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn, "float8_e5m2_x4": ml_dtypes.float8_e5m2,
           "float4_e2m1fn_x4": ml_dtypes.float4_e2m1fn}
EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}   # exponent of each format's largest normal


def scale_partition(group):
    """The published layout: the scale of group g sits at partition 32*(g//4) + g%4."""
    return 32 * (group // 4) + group % 4


def reference_quantize(x, fmt):
    """OCP MX quantization with the published x2 block scale, group = 8 partitions x 4 values."""
    p, f = x.shape
    groups = x.astype(np.float64).reshape(p // 8, 8, f // 4, 4)
    amax = np.abs(groups).max(axis=(1, 3))
    _, e = np.frexp(amax)                       # amax = m * 2**e, 0.5 <= m < 1
    floor_log2 = np.where(amax > 0, e - 1, -127)
    biased = np.clip(floor_log2 - EMAX[fmt] + 1 + 127, 0, 254).astype(np.int64)
    q = (groups / 2.0 ** (biased[:, None, :, None] - 127)).astype(ELEMENT[fmt])
    return q.reshape(p, f // 4, 4), biased


def packed_bytes(words, fmt):
    """The four element codes of each packed word (element q = bits [q*w, (q+1)*w))."""
    if fmt == "float4_e2m1fn_x4":
        nibbles = np.stack([(words >> (4 * q)) & 0xF for q in range(4)], axis=-1).astype(np.uint8)
        return nibbles.view(ml_dtypes.float4_e2m1fn)
    return words.astype("<u4").view(np.uint8).reshape(words.shape + (4,)).view(ELEMENT[fmt])


def pack_words(values, fmt):
    codes = values.astype(ELEMENT[fmt]).view(np.uint8).astype(np.uint32)
    if fmt == "float4_e2m1fn_x4":
        return sum((codes[..., q] & 0xF) << (4 * q) for q in range(4)).astype(np.uint16)
    return codes[..., 0] | codes[..., 1] << 8 | codes[..., 2] << 16 | codes[..., 3] << 24


@nki.jit
def quantize_kernel(x, out_q, out_s, fmt, scale_dtype):
    p, f = x.shape
    src = nl.load(x)
    q = nl.ndarray((p, f // 4), getattr(nl, fmt))
    s = nl.ndarray((p, f // 4), scale_dtype)
    nisa.quantize_mx(dst=q, src=src, dst_scale=s)
    nisa.dma_copy(dst=out_q, src=q)
    nisa.dma_copy(dst=out_s, src=s)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn_x4", "float8_e5m2_x4"])
@pytest.mark.parametrize("src_dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("shape", [(32, 4), (64, 40), (128, 512)])
def test_quantize_mx_matches_reference(fmt, src_dtype, shape):
    x = (RNG.standard_normal(shape) * RNG.choice([1e-3, 1.0, 300.0], size=(1, shape[1]))).astype(src_dtype)
    x[8:16] = 0  # an all-zero group
    out_q = np.zeros((shape[0], shape[1] // 4), np.uint32)
    out_s = np.zeros((shape[0], shape[1] // 4), np.uint8)
    nki.simulate(quantize_kernel, hardware="trn3")(x, out_q, out_s, fmt, nl.uint8)
    q, biased = reference_quantize(x.astype(np.float32), fmt)
    np.testing.assert_array_equal(packed_bytes(out_q, fmt).astype(np.float32), q.astype(np.float32))
    rows = scale_partition(np.arange(shape[0] // 8))
    np.testing.assert_array_equal(out_s[rows], biased)
    others = np.setdiff1d(np.arange(shape[0]), rows)
    assert not out_s[others].any()  # partitions outside the scale layout are untouched


def test_quantize_mx_e8m0_scales_and_dequantization():
    x = (RNG.standard_normal((32, 64)) * 10).astype(ml_dtypes.bfloat16)
    out_q = np.zeros((32, 16), np.uint32)
    out_s = np.zeros((32, 16), ml_dtypes.float8_e8m0fnu)
    nki.simulate(quantize_kernel, hardware="trn3")(x, out_q, out_s, "float8_e4m3fn_x4", nl.float8_e8m0fnu)
    scales = np.repeat(out_s[:4].astype(np.float32), 8, axis=0)[:, :, None]
    dequantized = (packed_bytes(out_q, "float8_e4m3fn_x4").astype(np.float32) * scales).reshape(32, 64)
    np.testing.assert_allclose(dequantized, x.astype(np.float32), rtol=2 ** -3)


def _mx_operand(k, free, fmt):
    """Random packed MX data [k, free] (uint words) and scales in the SBUF quadrant layout [k, free]."""
    values = RNG.uniform(-4, 4, (k, free, 4)).astype(ELEMENT[fmt]).astype(np.float32)
    scales = np.zeros((k, free), np.uint8)
    scales[scale_partition(np.arange(k // 8))] = RNG.integers(120, 134, (k // 8, free))
    return pack_words(values, fmt), scales


def _dequantized(words, scales, fmt):
    k = words.shape[0]
    factors = 2.0 ** (scales[scale_partition(np.arange(k // 8))].astype(np.float64) - 127)
    return packed_bytes(words, fmt).astype(np.float64) * np.repeat(factors, 8, axis=0)[:, :, None]


@nki.jit
def matmul_kernel(st, st_scale, mv, mv_scale, out, st_fmt, mv_fmt, out_dtype, accumulate):
    stationary = nl.ndarray(st.shape, getattr(nl, st_fmt))
    moving = nl.ndarray(mv.shape, getattr(nl, mv_fmt))
    nisa.dma_copy(dst=stationary, src=st)   # bits of the uint words into the packed tile
    nisa.dma_copy(dst=moving, src=mv)
    s_scale, m_scale = nl.load(st_scale), nl.load(mv_scale)
    res = nl.ndarray(out.shape, out_dtype, buffer=nl.psum)
    nisa.memset(dst=res, value=1.0)
    nisa.nc_matmul_mx(dst=res, stationary=stationary, moving=moving, stationary_scale=s_scale,
                      moving_scale=m_scale, accumulate=accumulate)
    nl.store(out, nl.copy(res, dtype=nl.float32))


@pytest.mark.parametrize("st_fmt,mv_fmt", [("float8_e4m3fn_x4", "float8_e4m3fn_x4"),
                                           ("float8_e5m2_x4", "float8_e5m2_x4"),
                                           ("float4_e2m1fn_x4", "float8_e5m2_x4"),
                                           ("float4_e2m1fn_x4", "float4_e2m1fn_x4")])
@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (32, 2, 1), (96, 64, 100)])
def test_nc_matmul_mx_matches_reference(st_fmt, mv_fmt, k, m, n):
    st, st_scale = _mx_operand(k, m, st_fmt)
    mv, mv_scale = _mx_operand(k, n, mv_fmt)
    out = np.zeros((m, n), np.float32)
    nki.simulate(matmul_kernel, hardware="trn3")(st, st_scale, mv, mv_scale, out, st_fmt, mv_fmt, nl.float32, False)
    ref = np.einsum("kmq,knq->mn", _dequantized(st, st_scale, st_fmt), _dequantized(mv, mv_scale, mv_fmt))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_nc_matmul_mx_bf16_psum_accumulates():
    st, st_scale = _mx_operand(64, 16, "float8_e4m3fn_x4")
    mv, mv_scale = _mx_operand(64, 1024, "float8_e4m3fn_x4")   # bf16 dst: a PSUM bank holds 1024
    out = np.zeros((16, 1024), np.float32)
    nki.simulate(matmul_kernel, hardware="trn3")(st, st_scale, mv, mv_scale, out, "float8_e4m3fn_x4",
                                                 "float8_e4m3fn_x4", nl.bfloat16, None)
    ref = np.einsum("kmq,knq->mn", _dequantized(st, st_scale, "float8_e4m3fn_x4"),
                    _dequantized(mv, mv_scale, "float8_e4m3fn_x4"))
    expected = (1.0 + ref.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=2 ** -7)


def test_quantize_then_matmul_approximates_bf16_matmul():
    @nki.jit
    def k(a, b, out):
        qa = nl.ndarray((64, 16), nl.float8_e4m3fn_x4)
        sa = nl.ndarray((64, 16), nl.uint8)
        qb = nl.ndarray((64, 128), nl.float8_e5m2_x4)
        sb = nl.ndarray((64, 128), nl.float8_e8m0fnu)
        nisa.quantize_mx(qa, nl.load(a), sa)
        nisa.quantize_mx(qb, nl.load(b), sb)
        res = nl.ndarray((16, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(res, qa, qb, sa, sb, tile_position=(0, 0), tile_size=(64, 128))
        nl.store(out, nl.copy(res))

    a = RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((64, 512)).astype(ml_dtypes.bfloat16)
    out = np.zeros((16, 128), np.float32)
    nki.simulate(k, hardware="trn3")(a, b, out)
    # The interleaved layout: element [p, j] packs the contraction values (p, q) of column j.
    ref = np.einsum("pjq,pnq->jn", a.astype(np.float32).reshape(64, 16, 4), b.astype(np.float32).reshape(64, 128, 4))
    assert np.abs(out - ref).max() < 0.1 * np.abs(ref).max()


def test_mx_costs():
    st, st_scale = _mx_operand(128, 128, "float8_e4m3fn_x4")
    mv, mv_scale = _mx_operand(128, 512, "float8_e4m3fn_x4")
    nki.simulate(matmul_kernel, hardware="trn3")(st, st_scale, mv, mv_scale, np.zeros((128, 512), np.float32),
                                                 "float8_e4m3fn_x4", "float8_e4m3fn_x4", nl.float32, False)
    rec = next(r for r in nki.simulator.last_report().instructions if r.opcode == "matmul_mx")
    assert (rec.engine, rec.dtype, rec.flops) == ("TensorE", "float8_e4m3fn_x4", 2 * 512 * 128 * 512)
    # 4x the FLOPs of a bf16 pass, in the time of a bf16 pass over the same N moving columns.
    assert rec.seconds == pytest.approx(cm.matmul_seconds(cm.TRN3, 512, ml_dtypes.bfloat16), rel=0.01)

    nki.simulate(quantize_kernel, hardware="trn3")(np.ones((128, 512), ml_dtypes.bfloat16),
                                                   np.zeros((128, 128), np.uint32), np.zeros((128, 128), np.uint8),
                                                   "float8_e4m3fn_x4", nl.uint8)
    rec = next(r for r in nki.simulator.last_report().instructions if r.opcode == "quantize_mx")
    # Four values per partition per cycle: half the lane time of a one-pass VectorE instruction.
    assert rec.engine == "VectorE"
    assert rec.seconds == pytest.approx(cm.lane_seconds(cm.TRN3, cm.VECTOR, 256))


def test_x4_dtypes_are_distinct_and_exported():
    assert len({nl.float8_e4m3fn_x4, nl.float8_e5m2_x4, nl.float4_e2m1fn_x4, nl.uint32}) == 4
    assert (nl.float8_e4m3fn_x4.itemsize, nl.float4_e2m1fn_x4.itemsize) == (4, 2)
    assert nl.float8_e8m0fnu == np.dtype(ml_dtypes.float8_e8m0fnu)


# ----------------------------------------------------------------------------- rules
def _quantize_rule_kernel(p, f, src_dtype, fmt="float8_e4m3fn_x4", scale_shape=None):
    @nki.jit
    def k():
        src = nl.zeros((p, f), src_dtype)
        q = nl.ndarray((p, max(f // 4, 1)), getattr(nl, fmt))
        s = nl.ndarray(scale_shape or (p, max(f // 4, 1)), nl.uint8)
        nisa.quantize_mx(q, src, s)  # <- rule
    return k


def test_rule_mx_needs_trn3():
    expect_rule(_quantize_rule_kernel(32, 8, nl.bfloat16), [], "nc-version")


@pytest.mark.parametrize("args,rule", [((48, 8, nl.bfloat16), "mx-partition"),
                                       ((32, 8, nl.float32), "mx-dtype"),
                                       ((32, 6, nl.bfloat16), "mx-free"),
                                       ((32, 8, nl.bfloat16, "float4_e2m1fn_x4"), "mx-dtype"),
                                       ((64, 8, nl.bfloat16, "float8_e4m3fn_x4", (8, 2)), "mx-scale-shape")])
def test_quantize_mx_rules(args, rule):
    expect_rule(_quantize_rule_kernel(*args), [], rule, hardware="trn3")


def _matmul_rule_kernel(k_st, m, k_mv, n, dst_dtype=nl.float32, scale_rows=None):
    @nki.jit
    def k():
        st = nl.ndarray((k_st, m), nl.float8_e4m3fn_x4)
        mv = nl.ndarray((k_mv, n), nl.float8_e4m3fn_x4)
        s_st = nl.zeros((scale_rows or k_st, m), nl.uint8)
        s_mv = nl.zeros((k_mv, n), nl.uint8)
        res = nl.ndarray((m, n), dst_dtype, buffer=nl.psum)
        nisa.nc_matmul_mx(res, st, mv, s_st, s_mv)  # <- rule
    return k


@pytest.mark.parametrize("args,rule", [((64, 8, 32, 8), "matmul-contraction"),
                                       ((40, 8, 40, 8), "mx-partition"),
                                       ((32, 7, 32, 8), "matmul-stationary-free"),
                                       ((32, 8, 32, 513), "matmul-moving-free"),
                                       ((32, 8, 32, 8, nl.int32), "mx-dtype"),
                                       ((64, 8, 64, 8, nl.float32, 8), "mx-scale-shape")])
def test_nc_matmul_mx_rules(args, rule):
    expect_rule(_matmul_rule_kernel(*args), [], rule, hardware="trn3")
