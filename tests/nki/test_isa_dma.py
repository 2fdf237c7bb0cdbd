"""DMA transpose / DMA compute and the GpSimd gathers (nki.isa, nki.legacy.isa, nl.load_transpose2d,
nl.gather_flattened) against numpy."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import nki.legacy.isa as legacy_isa
from helpers_nki import expect_rule
from nki.simulator import cost_model as cm

RNG = np.random.default_rng(3)
DTYPES = [np.float32, ml_dtypes.bfloat16, np.int32]


def rand(shape, dtype):
    if np.dtype(dtype).kind == "i":
        return RNG.integers(-1000, 1000, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def records(opcode):
    return [r for r in nki.simulator.last_report().instructions if r.opcode == opcode]


# ----------------------------------------------------------------------------- dma_transpose
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 128), (128, 128), (1, 5), (5, 1)])
def test_dma_transpose_2d_from_hbm(dtype, shape):
    @nki.jit
    def k(x, out):
        t = nl.ndarray((x.shape[1], x.shape[0]), x.dtype)
        nisa.dma_transpose(dst=t, src=x)
        nl.store(out, t)

    x = rand(shape, dtype)
    out = np.zeros(shape[::-1], dtype)
    nki.simulate(k)(x, out)
    np.testing.assert_array_equal(out, x.T)
    (rec,) = records("dma_transpose")
    assert (rec.engine, rec.dma_bytes) == ("DMA", x.nbytes)
    assert rec.seconds == pytest.approx(cm.dma_seconds(cm.TRN2, x.nbytes))


@pytest.mark.parametrize("shape,perm", [((4, 3, 8), (2, 1, 0)), ((2, 3, 4, 5), (3, 1, 2, 0))])
def test_dma_transpose_3d_4d_from_sbuf(shape, perm):
    @nki.jit
    def k(x, out):
        t = nl.ndarray(out.shape, x.dtype)
        nisa.dma_transpose(dst=t, src=nl.load(x), axes=perm)
        nl.store(out, t)

    x = rand(shape, np.float32)
    out = np.zeros(tuple(shape[a] for a in perm), np.float32)
    nki.simulate(k)(x, out)
    np.testing.assert_array_equal(out, np.transpose(x, perm))


def test_dma_transpose_hwdge_and_legacy_and_load_transpose2d():
    @nki.jit
    def k(x, out_a, out_b, out_c):
        t = nl.ndarray((128, 16), x.dtype)
        nisa.dma_transpose(dst=t, src=x[:, 0:128], dge_mode=nisa.dge_mode.hwdge)
        nl.store(out_a, t)
        nl.store(out_b, legacy_isa.dma_transpose(x[:, 128:256], dtype=nl.float32))
        nl.store(out_c, nl.load_transpose2d(x[:, 0:100]))

    x = rand((16, 256), ml_dtypes.bfloat16)
    out_a, out_b, out_c = np.zeros((128, 16), x.dtype), np.zeros((128, 16), np.float32), np.zeros((100, 16), x.dtype)
    nki.simulate(k)(x, out_a, out_b, out_c)
    np.testing.assert_array_equal(out_a, x[:, :128].T)
    np.testing.assert_array_equal(out_b, x[:, 128:].T.astype(np.float32))
    np.testing.assert_array_equal(out_c, x[:, :100].T)
    assert len(records("load_transpose2d")) == 1


# ----------------------------------------------------------------------------- dma_compute
@pytest.mark.parametrize("dst_dtype", [np.float32, ml_dtypes.bfloat16])
def test_dma_compute_sums_sources_in_fp32(dst_dtype):
    @nki.jit
    def k(a, b, c, out):
        nisa.dma_compute(dst=out, srcs=[a, nl.load(b), c], reduce_op=nl.add, scales=[1.0, 1.0, 1.0])

    a, b = rand((128, 33), np.float32), rand((128, 33), ml_dtypes.bfloat16)
    c = rand((128, 33), np.int32)
    out = np.zeros((128, 33), dst_dtype)
    nki.simulate(k)(a, b, c, out)
    expected = (a + b.astype(np.float32) + c.astype(np.float32)).astype(dst_dtype)
    np.testing.assert_array_equal(out, expected)
    (rec,) = records("dma_compute[3]")
    assert rec.dma_bytes == a.nbytes + b.nbytes + c.nbytes


def test_dma_compute_into_sbuf_single_source():
    @nki.jit
    def k(a, out):
        t = nl.ndarray((4, 8), nl.int32)
        nisa.dma_compute(t, [a], nl.add)
        nl.store(out, t)

    a = rand((4, 8), np.float32) * 100
    out = np.zeros((4, 8), np.int32)
    nki.simulate(k)(a, out)
    np.testing.assert_array_equal(out, np.rint(a).astype(np.int32))


# ----------------------------------------------------------------------------- GpSimd gathers
def reference_local_gather(src, index, num_elem, num_valid):
    """The published numpy semantics: per 16-partition core, the core's indices (flattened
    partition-first) each gather num_elem contiguous elements of every partition of the core."""
    p = src.shape[0]
    flat = src.reshape(p, -1)
    per_core = index.size // (p // 16)
    valid = num_valid or per_core
    out = np.zeros((p, valid, num_elem), src.dtype)
    for core in range(p // 16):
        rows = slice(16 * core, 16 * core + 16)
        idx = index[rows].flatten(order="F")[:valid]
        for i, start in enumerate(idx):
            out[rows, i, :] = flat[rows, start:start + num_elem]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p,num_elem,num_valid", [(128, 4, 64), (128, 1, None), (32, 2, 5), (16, 32, None)])
def test_local_gather(dtype, p, num_elem, num_valid):
    @nki.jit
    def k(src, index, out):
        dst = nl.ndarray(out.shape, src.dtype)
        nisa.local_gather(dst, nl.load(src), nl.load(index), num_elem, num_valid)
        nl.store(out, dst)

    src = rand((p, 64, 4), dtype)
    index = RNG.integers(0, 256 - num_elem, (p, 4)).astype(np.uint16)
    expected = reference_local_gather(src, index, num_elem, num_valid)
    out = np.zeros(expected.shape, dtype)
    nki.simulate(k)(src, index, out)
    np.testing.assert_array_equal(out, expected)
    (rec,) = records("local_gather")
    assert rec.engine == "GpSimd"


def test_legacy_local_gather_returns_new_tile():
    @nki.jit
    def k(src, index, out):
        nl.store(out, legacy_isa.local_gather(nl.load(src), nl.load(index), num_elem_per_idx=2))

    src, index = rand((16, 10), np.float32), RNG.integers(0, 9, (16, 3)).astype(np.uint16)
    out = np.zeros((16, 48, 2), np.float32)
    nki.simulate(k)(src, index, out)
    np.testing.assert_array_equal(out, reference_local_gather(src, index, 2, None))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("data_shape,index_shape", [((128, 512), (128, 512)), ((3, 4, 5), (3, 7)), ((2, 1), (2, 1))])
def test_nc_n_gather_and_gather_flattened(dtype, data_shape, index_shape):
    @nki.jit
    def k(data, indices, out_isa, out_nl):
        d, i = nl.load(data), nl.load(indices)
        dst = nl.ndarray(out_isa.shape, data.dtype)
        nisa.nc_n_gather(dst, d, i)
        nl.store(out_isa, dst)
        nl.store(out_nl, nl.gather_flattened(d, i, dtype=nl.float32))

    data = rand(data_shape, dtype)
    free = int(np.prod(data_shape[1:]))
    indices = RNG.integers(0, free, index_shape).astype(np.uint32)
    expected = np.take_along_axis(data.reshape(data_shape[0], -1), indices.reshape(index_shape[0], -1), axis=1)
    out_isa, out_nl = np.zeros(index_shape, dtype), np.zeros(index_shape, np.float32)
    nki.simulate(k)(data, indices, out_isa, out_nl)
    np.testing.assert_array_equal(out_isa, expected.reshape(index_shape))
    np.testing.assert_array_equal(out_nl, expected.reshape(index_shape).astype(np.float32))
    assert {r.engine for r in records("nc_n_gather") + records("gather_flattened")} == {"GpSimd"}


# ----------------------------------------------------------------------------- rules


def test_rule_dma_transpose_axes():
    @nki.jit
    def k(x):
        t = nl.ndarray((4, 8), x.dtype)
        nisa.dma_transpose(t, x, axes=(0, 1))  # <- rule
    expect_rule(k, [np.zeros((8, 4), np.float32)], "dma-transpose-axes")


def test_rule_dma_transpose_hwdge():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 8), x.dtype)
        nisa.dma_transpose(t, x, dge_mode=nisa.dge_mode.hwdge)  # <- rule
    expect_rule(k, [np.zeros((8, 128), np.float32)], "dma-transpose-hwdge")


def test_rule_dma_transpose_dtype():
    @nki.jit
    def k(x):
        t = nl.ndarray((4, 8), nl.bfloat16)
        nisa.dma_transpose(t, x)  # <- rule
    expect_rule(k, [np.zeros((8, 4), np.float32)], "dtype-mismatch")


def test_rule_load_transpose2d_reads_hbm():
    @nki.jit
    def k(x):
        nl.load_transpose2d(nl.load(x))  # <- rule
    expect_rule(k, [np.zeros((8, 4), np.float32)], "load-source")


@pytest.mark.parametrize("kwargs,rule", [({"scales": [2.0]}, "dma-compute-scale"),
                                         ({"reduce_op": nl.multiply}, "unsupported-op")])
def test_rules_dma_compute(kwargs, rule):
    @nki.jit
    def k(x, out):
        nisa.dma_compute(out, [x], **{"reduce_op": nl.add, **kwargs})  # <- rule
    expect_rule(k, [np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32)], rule)


@pytest.mark.parametrize("p,index_dtype,num_elem,rule", [(24, np.uint16, 1, "local-gather-partition"),
                                                         (16, np.uint16, 3, "local-gather-elements"),
                                                         (16, np.int32, 1, "index-dtype")])
def test_rules_local_gather(p, index_dtype, num_elem, rule):
    @nki.jit
    def k(x, index):
        src, idx = nl.load(x), nl.load(index)
        nisa.local_gather(nl.ndarray((p, 4 * num_elem), x.dtype), src, idx, num_elem)  # <- rule
    expect_rule(k, [np.zeros((p, 8), np.float32), np.zeros((p, 4), index_dtype)], rule)


def test_rule_gather_out_of_bounds():
    @nki.jit
    def k(x, index):
        nisa.nc_n_gather(nl.ndarray((4, 2), x.dtype), nl.load(x), nl.load(index))  # <- rule
    expect_rule(k, [np.zeros((4, 8), np.float32), np.full((4, 2), 8, np.uint32)], "out-of-bounds")


def test_rule_gather_reads_sbuf_not_psum():
    @nki.jit
    def k(index):
        data = nl.zeros((4, 8), nl.float32, buffer=nl.psum)
        nisa.nc_n_gather(nl.ndarray((4, 2), nl.float32), data, nl.load(index))  # <- rule
    expect_rule(k, [np.zeros((4, 2), np.uint32)], "gpsimd-psum")
