"""nki.lnc (sendrecv, sendrecv_compute, core_barrier between the 2 cores of a logical core), the
deprecated nki.isa spellings, and nl.spmd_dim launch grids."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import marked_line

BF16 = ml_dtypes.bfloat16
REDUCE = {"add": (nl.add, np.add), "maximum": (nl.maximum, np.maximum), "minimum": (nl.minimum, np.minimum)}


def values(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@nki.jit
def exchange_reduce(x, out, op, space):
    """Each core reduces its x[rank] with the other core's, in SBUF tiles or private HBM tensors."""
    r = nl.program_id(0)
    buffer = nl.sbuf if space == "sbuf" else nl.private_hbm
    mine = nl.ndarray(x.shape[1:], x.dtype, buffer=buffer)
    nisa.dma_copy(dst=mine, src=x[r])
    got = nl.ndarray(x.shape[1:], x.dtype, buffer=buffer)
    nki.lnc.sendrecv_compute(src=mine, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r, reduce_op=op)
    nisa.dma_copy(dst=out[r], src=got)
    return out


@pytest.mark.parametrize("space", ["sbuf", "hbm"])
@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("dtype, shape", [(np.float32, (128, 64)), (BF16, (64, 3)), (np.float32, (1, 1))])
def test_sendrecv_compute_reduces_the_local_and_received_tiles(space, op, dtype, shape):
    x = values((2,) + shape, dtype)
    out = exchange_reduce[2](x, np.zeros_like(x), REDUCE[op][0], space)
    # reduced in fp32, rounded once to the tile's dtype: the same value on both cores
    expected = REDUCE[op][1](x[0].astype(np.float32), x[1].astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(out[0], expected)
    np.testing.assert_array_equal(out[1], expected)
    report = nki.simulator.last_report()
    assert report.opcode_counts["DMA.sendrecv_compute"] == 2 and report.engine_busy_seconds["DMA"] > 0


@nki.jit
def bad_lnc(x, case):
    r = nl.program_id(0)
    t = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
    shared = nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)
    if case == "mixed":
        nki.lnc.sendrecv_compute(src=x, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r, reduce_op=nl.add)  # <- mixed
    elif case == "shared":
        nki.lnc.sendrecv_compute(src=shared, dst=shared, send_to_rank=1 - r,  # <- shared
                                 recv_from_rank=1 - r, reduce_op=nl.add)
    elif case == "op":
        nki.lnc.sendrecv_compute(src=t, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r, reduce_op=nl.multiply)  # <- op
    elif case == "priority":
        nki.lnc.sendrecv(src=t, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r, priority=4)  # <- priority
    elif case == "gpsimd":
        nki.lnc.sendrecv(src=t, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r, priority=0,  # <- gpsimd
                         dma_engine=nisa.dma_engine.gpsimd_dma)
    return x


@pytest.mark.parametrize("case, rule", [("mixed", "sendrecv-buffer"), ("shared", "sendrecv-buffer"),
                                        ("op", "collective-op"), ("priority", "sendrecv-priority"),
                                        ("gpsimd", "sendrecv-priority")])
def test_lnc_rules(case, rule):
    with pytest.raises(nki.NKIError) as info:
        bad_lnc[2](np.zeros((4, 4), np.float32), case)
    assert info.value.rule == rule, str(info.value)
    assert info.value.location == marked_line(bad_lnc, f"# <- {case}")
    assert "nki.lnc.sendrecv" in str(info.value)


def test_priorities_in_range_are_accepted():
    @nki.jit
    def swap(x, out):
        r = nl.program_id(0)
        t = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r])
        got = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
        nki.lnc.sendrecv(src=t, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r, priority=3)
        nisa.dma_copy(dst=out[r], src=got)
        return out
    x = values((2, 2, 3), np.float32)
    np.testing.assert_array_equal(swap[2](x, np.zeros_like(x)), x[::-1])


@nki.jit
def deprecated_spellings(x, out):
    r = nl.program_id(0)
    t = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[r])
    got = nl.ndarray((2, 3), x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=got, send_to_rank=1 - r, recv_from_rank=1 - r, pipe_id=0)  # <- sendrecv
    nisa.sendrecv_compute(src=got, dst=t, send_to_rank=1 - r, recv_from_rank=1 - r, reduce_op=nl.add)  # <- compute
    nisa.core_barrier(out, (0, 1))  # <- barrier
    nisa.dma_copy(dst=out[r], src=t)
    return out


def test_isa_spellings_still_work_and_warn_at_the_kernel_line():
    x = values((2, 2, 3), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = deprecated_spellings[2](x, np.zeros_like(x))
    # after the swap each core holds the other's x; sendrecv_compute adds them back together
    np.testing.assert_array_equal(out[0], (x[0] + x[1]).astype(np.float32))
    np.testing.assert_array_equal(out[1], out[0])
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    lines = {f"{w.filename}:{w.lineno}" for w in deprecations}
    assert lines == {marked_line(deprecated_spellings, f"# <- {m}") for m in ("sendrecv", "compute", "barrier")}
    assert {str(w.message).split(":")[0] for w in deprecations} == {
        f"nki.isa.{name} is deprecated" for name in ("sendrecv", "sendrecv_compute", "core_barrier")}


@nki.jit
def grid_ids(out):
    i, j = nl.program_id(0), nl.program_id(1)
    nl.store(out[i, j], value=nl.full((1,), 100 * i + 10 * j + nl.num_programs(0), nl.float32))
    return out


@pytest.mark.parametrize("dim", [nl.spmd_dim(nl.nc(2), 2), nl.spmd_dim(2, nl.nc(2)), nl.spmd_dim(4),
                                 nl.spmd_dim(2, 2)])
def test_spmd_dim_is_a_grid_dimension_of_the_product_of_its_sub_dimensions(dim):
    expected = grid_ids[4, 2](np.zeros((4, 2, 1), np.float32))
    np.testing.assert_array_equal(grid_ids[dim, 2](np.zeros((4, 2, 1), np.float32)), expected)
    assert nki.simulator.last_report().grid == (4, 2)
    assert int(dim) == 4 and repr(dim).startswith("spmd_dim(")


@pytest.mark.parametrize("sub_dims", [(), (0, 2), (nl.nc(2), nl.nc(2)), (2.5,)])
def test_spmd_dim_rejects_bad_sub_dimensions(sub_dims):
    with pytest.raises(nki.NKIError) as info:
        nl.spmd_dim(*sub_dims)
    assert info.value.rule == "grid"


def test_each_core_applies_its_own_calls_reduction():
    @nki.jit
    def mixed(x, out):
        r = nl.program_id(0)
        t = nl.ndarray((4, 8), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[r])
        got = nl.ndarray((4, 8), x.dtype, buffer=nl.sbuf)
        if r == 0:
            nki.lnc.sendrecv_compute(src=t, dst=got, send_to_rank=1, recv_from_rank=1, reduce_op=nl.maximum)
        else:
            nki.lnc.sendrecv(src=t, dst=got, send_to_rank=0, recv_from_rank=0)
        nisa.dma_copy(dst=out[r], src=got)
        return out
    x = values((2, 4, 8), np.float32)
    out = mixed[2](x, np.zeros_like(x))
    np.testing.assert_array_equal(out[0], np.maximum(x[0], x[1]))
    np.testing.assert_array_equal(out[1], x[0])
