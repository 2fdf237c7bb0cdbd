"""Creation (empty_like, shared_constant, shared_identity_matrix, rand / random_seed / dropout),
memory regions, compiled loops, mgrid unpacking, device_print and tile_size."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule

F32 = np.float32


def test_memory_regions_and_predicates():
    @nki.jit
    def k(x):
        s = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        p = nl.ndarray((4, 4), nl.float32, buffer=nl.psum)
        h = nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)
        assert isinstance(nl.sbuf, nl.MemoryRegion) and nl.hbm == nl.private_hbm
        assert s.buffer == nl.sbuf and p.buffer == nl.psum and h.buffer == nl.shared_hbm and x.buffer == nl.hbm
        assert [nl.is_sbuf(s), nl.is_psum(p), nl.is_on_chip(p), nl.is_hbm(h), nl.is_hbm(x[0:2])] == [True] * 5
        assert not (nl.is_sbuf(p) or nl.is_hbm(s) or nl.is_on_chip(x))
        assert isinstance(s, nl.NKIObject) and nl.NKIObject(a=1, b=2).b == 2
        e = nl.empty_like(s, dtype=nl.int8)
        assert e.shape == s.shape and e.dtype == nl.int8 and e.buffer == nl.sbuf
    nki.simulate(k)(np.zeros((4, 4), F32))


def test_tile_size_constants():
    ts = nl.tile_size
    assert (ts.pmax, ts.psum_fmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax, ts.bn_stats_fmax) == \
        (128, 512, 128, 512, 512)
    assert (ts.psum_min_align, ts.sbuf_min_align, ts.psum_num_banks, ts.psum_fmax_bytes) == (4, 1, 8, 2048)
    assert ts.total_available_sbuf_size == 212984 and ts.sbuf_size_bytes == 128 * 224 * 1024


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16, nl.uint8])
@pytest.mark.parametrize("n", [128, 5])
def test_shared_identity_matrix(dtype, n):
    @nki.jit
    def k(out):
        nl.store(out, value=nl.shared_identity_matrix(n, dtype=dtype))
        return out
    out = nki.simulate(k)(np.zeros((n, n), dtype))
    np.testing.assert_array_equal(out, np.eye(n, dtype=dtype))


def test_shared_constant_is_shared_by_programs(tmp_path):
    const = np.arange(12, dtype=np.float64).reshape(3, 4) / 4
    np.save(tmp_path / "c.npy", const)

    @nki.jit
    def k(out):
        c = nl.shared_constant(const, dtype=nl.bfloat16)
        d = nl.shared_constant(str(tmp_path / "c.npy"), dtype=nl.float32)
        t = nl.ndarray((3, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=c)
        nl.store(out[nl.program_id(0)], value=t)
        assert c.buffer == nl.shared_hbm and d.dtype == nl.float32 and np.array_equal(d.data, const)
        return out
    out = nki.simulate(k[2])(np.zeros((2, 3, 4), F32))
    np.testing.assert_array_equal(out, np.stack([const, const]).astype(F32))


def test_rand_random_seed_dropout():
    @nki.jit
    def k(x, a, b, c, d):
        nl.random_seed(nl.full((1, 1), 42, dtype=nl.int32))
        nl.store(a, value=nl.rand((128, 512), dtype=nl.float32))
        nl.random_seed(nl.full((1, 1), 42, dtype=nl.int32))
        nl.store(b, value=nl.rand((128, 512), dtype=nl.float32))
        nl.store(c, value=nl.rand((128, 512), dtype=nl.float32))
        nl.store(d, value=nl.dropout(nl.load(x), 0.25))
        return a, b, c, d
    x = np.full((128, 512), 3.0, F32)
    a, b, c, d = nki.simulate(k)(x, *(np.zeros((128, 512), F32) for _ in range(4)))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)
    assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.01 and abs(np.var(a) - 1 / 12) < 0.005
    assert set(np.unique(d)) <= {0.0, 3.0} and abs((d == 0).mean() - 0.25) < 0.01


def test_compiled_loops_read_runtime_bounds():
    @nki.jit
    def k(bound, out):
        ub = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ub, src=bound)
        acc = nl.zeros((1, 8), nl.float32)
        seen = []
        nl.fori_loop(1, ub, lambda i: seen.append(i), step=2)
        for i in nl.dynamic_range(ub):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=float(i))
        counter = [3]

        def body(r):
            counter[0] -= 1
            return counter[0]
        nl.while_loop(ub, body)
        with nl.no_reorder():
            nl.store(out, value=acc)
        assert seen == [1, 3] and counter[0] == 0
        return out
    out = nki.simulate(k)(np.array([[5]], np.int32), np.zeros((1, 8), F32))
    np.testing.assert_array_equal(out, np.full((1, 8), 0 + 1 + 2 + 3 + 4, F32))


def test_mgrid_unpacks_and_keeps_attributes():
    x = np.arange(128 * 6, dtype=F32).reshape(128, 6)

    @nki.jit
    def k(x, out):
        i_p, i_f = nl.mgrid[0:128, 0:1]
        g = nl.mgrid[0:128, 0:6]
        assert i_p.shape == (128, 1) and i_f.shape == (1, 1) and g.p.shape == (128, 1) and g.x.shape == (1, 6)
        col = nl.load(x[i_p, i_f + 2])
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, g.x]) + col)
        return out
    np.testing.assert_array_equal(nki.simulate(k)(x, np.zeros_like(x)), x + x[:, 2:3])


def test_device_print(capsys):
    @nki.jit
    def k(x):
        nl.device_print("tile:", nl.load(x))
        nl.device_print("hbm:", x[0:1])
    nki.simulate(k)(np.arange(4, dtype=F32).reshape(2, 2))
    assert capsys.readouterr().out == "tile: [[0. 1.]\n [2. 3.]]\nhbm: [[0. 1.]]\n"


def test_compiled_loop_step_must_be_static():
    @nki.jit
    def k():
        nl.fori_loop(0, 4, lambda i: None, step=0)  # <- rule
    expect_rule(k, [], "loop-step")
