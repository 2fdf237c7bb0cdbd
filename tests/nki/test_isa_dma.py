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


# ----------------------------------------------------------------------------- DMA row gather (vector_offset)
BF16 = ml_dtypes.bfloat16
ROW_DTYPES = [np.float32, BF16, np.float16, np.int32, np.int8]
SKIP, ERROR = nisa.oob_mode.skip, nisa.oob_mode.error


def offsets_tile(idx):
    """The (P, 1) SBUF tile of the row offsets `idx` (an HBM tensor)."""
    tile = nl.ndarray(idx.shape, idx.dtype)
    nisa.dma_copy(dst=tile, src=idx)
    return tile


def row_view(data, offsets, form):
    """data's rows at `offsets`, by either published spelling."""
    if form == "vector_select":
        return data.vector_select(0, offsets)
    return data.ap([[data.shape[1], offsets.shape[0]], [1, data.shape[1]]], vector_offset=offsets, indirect_dim=0)


def reference_gather(data, idx, init, extent=None):
    """Row p = data[idx[p]] where idx[p] is inside the first `extent` rows, else init's row."""
    idx = idx.reshape(-1).astype(np.int64)
    valid = (idx >= 0) & (idx < (data.shape[0] if extent is None else extent))
    return np.where(valid.reshape((-1,) + (1,) * (data.ndim - 1)), data[np.where(valid, idx, 0)], init)


def reference_scatter(data, idx, rows, add=False):
    """data[idx[p]] = rows[p] (or += in fp32, rounded each time) in row order, skipping rows out of bounds."""
    out = data.copy()
    for p, i in enumerate(idx.reshape(-1)):
        if 0 <= i < data.shape[0]:
            out[i] = (out[i].astype(np.float32) + rows[p].astype(np.float32)).astype(data.dtype) if add else rows[p]
    return out


def row_offsets(p, n, oob=0):
    """p row offsets into n rows, repeats included, the first `oob` of them out of bounds (past the end or negative)."""
    idx = RNG.integers(0, n, p)
    idx[:oob] = np.where(np.arange(oob) % 2, -1 - np.arange(oob), n + np.arange(oob))
    return RNG.permutation(idx).astype(np.int32).reshape(p, 1)


@pytest.mark.parametrize("dtype", ROW_DTYPES)
@pytest.mark.parametrize("p,n,f", [(128, 300, 64), (37, 5, 33), (1, 2, 1)])
@pytest.mark.parametrize("form", ["ap", "vector_select"])
def test_row_gather_matches_numpy(dtype, p, n, f, form):
    @nki.jit
    def k(data, idx, out):
        t = nl.ndarray(out.shape, data.dtype)
        nisa.dma_copy(dst=t, src=row_view(data, offsets_tile(idx), form))
        nisa.dma_copy(dst=out, src=t)

    data, idx = rand((n, f), dtype), row_offsets(p, n)
    assert len(np.unique(idx)) < p or p == 1  # repeated rows are gathered again
    out = np.zeros((p, f), dtype)
    nki.simulate(k)(data, idx, out)
    np.testing.assert_array_equal(out, data[idx[:, 0]])
    gather = records("dma_copy")[1]  # after the offsets' load
    assert (gather.engine, gather.dma_bytes) == ("DMA", p * f * np.dtype(dtype).itemsize)


def test_row_gather_of_views_patterns_and_other_dims():
    @nki.jit
    def k(data, idx, out_slice, out_pattern, out_dim1, out_load):
        offsets = offsets_tile(idx)
        for out, src in ((out_slice, data[0][10:60].vector_select(0, offsets)),
                         (out_pattern, data[1].ap([[8, 16], [2, 3]], offset=3, vector_offset=offsets, indirect_dim=0)),
                         (out_dim1, data.vector_select(1, offsets))):
            t = nl.ndarray(out.shape, data.dtype)
            nisa.dma_copy(dst=t, src=src)
            nisa.dma_copy(dst=out, src=t)
        nl.store(out_load, nl.load(data[1].vector_select(0, offsets)))

    data, idx = rand((2, 64, 8), np.float32), row_offsets(16, 50)
    rows = idx[:, 0]
    outs = [np.zeros((16, 8), np.float32), np.zeros((16, 3), np.float32), np.zeros((16, 2, 8), np.float32),
            np.zeros((16, 8), np.float32)]
    nki.simulate(k)(data, idx, *outs)
    np.testing.assert_array_equal(outs[0], data[0, 10 + rows])
    np.testing.assert_array_equal(outs[1], data[1, rows][:, 3:9:2])
    np.testing.assert_array_equal(outs[2], np.moveaxis(data[:, rows], 1, 0))
    np.testing.assert_array_equal(outs[3], data[1, rows])


@pytest.mark.parametrize("dtype", ROW_DTYPES)
def test_row_scatter_keeps_other_rows_and_last_repeat_wins(dtype):
    @nki.jit
    def k(data, idx, rows):
        t = nl.ndarray(rows.shape, rows.dtype)
        nisa.dma_copy(dst=t, src=rows)
        nisa.dma_copy(dst=row_view(data, offsets_tile(idx), "ap"), src=t)

    data, idx, rows = rand((200, 24), dtype), row_offsets(128, 200), rand((128, 24), dtype)
    assert len(np.unique(idx)) < 128  # repeated offsets; rows no offset names keep their values
    expected = reference_scatter(data, idx, rows)
    nki.simulate(k)(data, idx, rows)
    np.testing.assert_array_equal(data, expected)


@pytest.mark.parametrize("p,n", [(128, 50), (37, 9)])
def test_oob_skip_leaves_the_rows_of_out_of_bounds_offsets(p, n):
    @nki.jit
    def k(data, idx, init, rows, out):
        offsets = offsets_tile(idx)
        t = nl.ndarray(init.shape, init.dtype)
        nisa.dma_copy(dst=t, src=init)
        nisa.dma_copy(dst=t, src=data.vector_select(0, offsets), oob_mode=SKIP)
        nisa.dma_copy(dst=out, src=t)
        s = nl.ndarray(rows.shape, rows.dtype)
        nisa.dma_copy(dst=s, src=rows)
        nisa.dma_copy(dst=data.vector_select(0, offsets), src=s, oob_mode=SKIP)

    data, idx = rand((n, 16), BF16), row_offsets(p, n, oob=7)
    init, rows, out = rand((p, 16), BF16), rand((p, 16), BF16), np.zeros((p, 16), BF16)
    before = data.copy()
    nki.simulate(k)(data, idx, init, rows, out)
    np.testing.assert_array_equal(out, reference_gather(before, idx, init))
    np.testing.assert_array_equal(data, reference_scatter(before, idx, rows))
    _, _, gather, _, _, scatter = records("dma_copy")
    assert gather.dma_bytes == scatter.dma_bytes == (p - 7) * 16 * 2  # skipped rows move nothing


def test_oob_is_judged_on_the_indirect_dimension_of_the_view():
    @nki.jit
    def k(data, idx, init, out):
        t = nl.ndarray(init.shape, init.dtype)
        nisa.dma_copy(dst=t, src=init)
        nisa.dma_copy(dst=t, src=data[0:10].vector_select(0, offsets_tile(idx)), oob_mode=SKIP)
        nisa.dma_copy(dst=out, src=t)

    data, init, out = rand((20, 4), np.float32), rand((16, 4), np.float32), np.zeros((16, 4), np.float32)
    idx = np.arange(16, dtype=np.int32).reshape(16, 1)  # rows 10..15 exist in the tensor, not in the view
    nki.simulate(k)(data, idx, init, out)
    np.testing.assert_array_equal(out, reference_gather(data, idx, init, extent=10))


def test_rule_out_of_bounds_gather_raises_by_default():
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((16, 4), data.dtype)
        nisa.dma_copy(dst=t, src=data.vector_select(0, offsets_tile(idx)))  # <- rule

    err = expect_rule(k, [rand((20, 4), np.float32), row_offsets(16, 20, oob=1)], "out-of-bounds")
    assert "oob_mode" in str(err)


def test_rule_out_of_bounds_scatter_raises_and_writes_nothing():
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((16, 4), data.dtype)
        nisa.memset(t, 1.0)
        nisa.dma_copy(dst=data.vector_select(0, offsets_tile(idx)), src=t, oob_mode=ERROR)  # <- rule

    data = rand((20, 4), np.float32)
    before = data.copy()
    expect_rule(k, [data, row_offsets(16, 20, oob=1)], "out-of-bounds")
    np.testing.assert_array_equal(data, before)


# ----------------------------------------------------------------------------- read-modify-write
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_dma_copy_rmw_add_accumulates_repeated_rows_in_order(dtype):
    @nki.jit
    def k(data, idx, rows, acc):
        t = nl.ndarray(rows.shape, rows.dtype)
        nisa.dma_copy(dst=t, src=rows)
        nisa.dma_copy(dst=row_view(data, offsets_tile(idx), "ap"), src=t, dst_rmw_op=nl.add)
        nisa.dma_copy(dst=acc[2:5], src=t[0:3], dst_rmw_op=nl.add)  # a plain destination

    data, idx, rows = rand((30, 12), dtype), row_offsets(96, 30), rand((96, 12), dtype)
    acc = rand((6, 12), np.float32)
    expected, expected_acc = reference_scatter(data, idx, rows, add=True), acc.copy()
    expected_acc[2:5] += rows[:3].astype(np.float32)
    nki.simulate(k)(data, idx, rows, acc)
    np.testing.assert_array_equal(data, expected)
    np.testing.assert_array_equal(acc, expected_acc)
    scatter, plain = records("dma_copy[add]")
    assert scatter.dma_bytes == 2 * rows.nbytes and plain.dma_bytes == 3 * 12 * (rows.itemsize + 4)


@pytest.mark.parametrize("kwargs,rule", [({"dst_rmw_op": nl.multiply}, "unsupported-op"),
                                         ({"dst_rmw_op": nl.add, "oob_mode": SKIP}, "dma-rmw-oob")])
def test_rules_dma_copy_rmw(kwargs, rule):
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((4, 3), data.dtype)
        nisa.memset(t, 1.0)
        nisa.dma_copy(dst=data.vector_select(0, offsets_tile(idx)), src=t, **kwargs)  # <- rule
    expect_rule(k, [rand((8, 3), np.float32), row_offsets(4, 8)], rule)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("skip", [False, True])
def test_dma_compute_scatter_rmw(dtype, skip):
    @nki.jit
    def k(data, idx, rows):
        t = nl.ndarray(rows.shape, rows.dtype)
        nisa.dma_copy(dst=t, src=rows)
        dst = row_view(data, offsets_tile(idx), "ap")
        nisa.dma_compute(dst=dst, srcs=[t, dst], reduce_op=nl.add, unique_indices=False,
                         oob_mode=SKIP if skip else ERROR)

    data, idx, rows = rand((50, 20), dtype), row_offsets(128, 50, oob=5 if skip else 0), rand((128, 20), np.float32)
    expected = reference_scatter(data, idx, rows, add=True)
    nki.simulate(k)(data, idx, rows)
    np.testing.assert_array_equal(data, expected)
    (rec,) = records("dma_compute[2]")
    moved = 128 - (5 if skip else 0)
    assert (rec.engine, rec.dma_bytes) == ("DMA", moved * 20 * (4 + np.dtype(dtype).itemsize))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
@pytest.mark.parametrize("skip", [False, True])
def test_dma_compute_gather_rmw(dtype, skip):
    @nki.jit
    def k(data, idx, acc, out):
        t = nl.ndarray(acc.shape, acc.dtype)
        nisa.dma_copy(dst=t, src=acc)
        nisa.dma_compute(dst=t[0:37, :], srcs=[t[0:37, :], data.vector_select(0, offsets_tile(idx))],
                         reduce_op=nl.add, oob_mode=SKIP if skip else ERROR)
        nisa.dma_copy(dst=out, src=t)

    data, idx = rand((9, 10), dtype), row_offsets(37, 9, oob=4 if skip else 0)
    acc, out = rand((37, 10), dtype), np.zeros((37, 10), dtype)
    gathered = reference_gather(data, idx, np.zeros_like(acc))
    expected = (acc.astype(np.float32) + gathered.astype(np.float32)).astype(dtype)
    nki.simulate(k)(data, idx, acc, out)
    np.testing.assert_array_equal(out, expected)


def test_rule_dma_compute_repeated_rows_need_unique_indices_false():
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((16, 4), data.dtype)
        nisa.memset(t, 1.0)
        dst = data.vector_select(0, offsets_tile(idx))
        nisa.dma_compute(dst=dst, srcs=[dst, t], reduce_op=nl.add)  # <- rule
    expect_rule(k, [rand((8, 4), np.float32), np.zeros((16, 1), np.int32)], "unique-indices")


@pytest.mark.parametrize("form", ["two_data_sources", "three_sources", "hbm_data"])
def test_rule_dma_compute_rmw_forms(form):
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((16, 4), data.dtype)
        nisa.memset(t, 1.0)
        dst = data.vector_select(0, offsets_tile(idx))
        srcs = {"two_data_sources": [t, t], "three_sources": [dst, t, t], "hbm_data": [dst, data[0:16]]}[form]
        nisa.dma_compute(dst=dst, srcs=srcs, reduce_op=nl.add)  # <- rule
    expect_rule(k, [rand((16, 4), np.float32), row_offsets(16, 16)], "dma-compute-rmw")


# ----------------------------------------------------------------------------- indirect dma_transpose
@pytest.mark.parametrize("shape,p", [((300, 64), 128), ((40, 3, 128), 32), ((20, 1, 2, 16), 16)])
@pytest.mark.parametrize("skip", [False, True])
def test_indirect_dma_transpose(shape, p, skip):
    @nki.jit
    def k(data, idx, init, out):
        t = nl.ndarray(init.shape, init.dtype)
        nisa.dma_copy(dst=t, src=init)
        nisa.dma_transpose(dst=t, src=data.vector_select(0, offsets_tile(idx)), dge_mode=nisa.dge_mode.swdge,
                           oob_mode=SKIP if skip else ERROR)
        nisa.dma_copy(dst=out, src=t)

    data, idx = rand(shape, BF16), row_offsets(p, shape[0], oob=3 if skip else 0).astype(np.uint32)
    perm = TRANSPOSE[len(shape)]
    out_shape = tuple(((p,) + shape[1:])[i] for i in perm)
    init, out = rand(out_shape, BF16), np.zeros(out_shape, BF16)
    gathered = reference_gather(data, idx.view(np.int32), np.transpose(init, np.argsort(perm)))
    nki.simulate(k)(data, idx, init, out)
    np.testing.assert_array_equal(out, np.transpose(gathered, perm))
    (rec,) = records("dma_transpose")
    assert rec.dma_bytes == (p - (3 if skip else 0)) * int(np.prod(shape[1:])) * 2


TRANSPOSE = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@pytest.mark.parametrize("shape,p,dtype,dge,rule", [
    ((64, 8), 16, BF16, "hwdge", "dma-transpose-dge"),
    ((64, 8), 16, np.float32, "swdge", "dma-transpose-indirect"),
    ((64, 8), 24, BF16, "swdge", "dma-transpose-indirect"),
    ((64, 2, 2, 8), 16, BF16, "unknown", "dma-transpose-indirect")])
def test_rules_indirect_dma_transpose(shape, p, dtype, dge, rule):
    @nki.jit
    def k(data, idx):
        rows = data.vector_select(0, offsets_tile(idx))
        t = nl.ndarray(tuple(rows.shape[i] for i in TRANSPOSE[len(shape)]), data.dtype)
        nisa.dma_transpose(dst=t, src=rows, dge_mode=getattr(nisa.dge_mode, dge))  # <- rule
    expect_rule(k, [rand(shape, dtype), row_offsets(p, shape[0]).astype(np.uint32)], rule)


def test_rules_indirect_dma_transpose_offsets_and_direct_swdge():
    @nki.jit
    def k(data, idx):
        t = nl.ndarray((8, 16), data.dtype)
        nisa.dma_transpose(dst=t, src=data.vector_select(0, offsets_tile(idx)))  # <- rule
    expect_rule(k, [rand((64, 8), BF16), row_offsets(16, 64)], "dtype")  # int32 offsets

    @nki.jit
    def direct(data):
        t = nl.ndarray((8, 16), data.dtype)
        nisa.dma_transpose(dst=t, src=data, dge_mode=nisa.dge_mode.swdge)  # <- rule
    expect_rule(direct, [rand((16, 8), BF16)], "dma-transpose-dge")


# ----------------------------------------------------------------------------- view rules
@pytest.mark.parametrize("case,rule", [("on_chip", "vector-offset-buffer"), ("two_columns", "vector-offset"),
                                       ("count", "vector-offset"), ("both_offsets", "vector-offset"),
                                       ("float_offsets", "dtype")])
def test_rules_vector_offset(case, rule):
    @nki.jit
    def k(data, idx):
        tensor = nl.ndarray((16, 4), data.dtype) if case == "on_chip" else data
        offsets = {"two_columns": nl.ndarray((16, 2), nl.int32),
                   "float_offsets": nl.ndarray((16, 1), nl.float32)}.get(case, offsets_tile(idx))
        pattern = [[4, 8 if case == "count" else 16], [1, 4]]
        scalar = 0 if case == "both_offsets" else None
        tensor.ap(pattern, scalar_offset=scalar, vector_offset=offsets)  # <- rule
    expect_rule(k, [rand((16, 4), np.float32), row_offsets(16, 16)], rule)


def test_rule_indirect_views_take_no_further_view_methods():
    @nki.jit
    def k(data, idx):
        rows = data.vector_select(0, offsets_tile(idx))
        assert rows.shape == (16, 4) and rows.is_indirect()
        rows.permute((1, 0))  # <- rule
    expect_rule(k, [rand((16, 4), np.float32), row_offsets(16, 16)], "view-layout")
