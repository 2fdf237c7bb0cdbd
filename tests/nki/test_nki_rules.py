"""Every hardware rule raises NKIError naming the rule and the kernel file:line."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import expect_rule
from nki.simulator import HardwareConfig

F32 = np.float32


def test_partition_dim_over_128():
    @nki.jit
    def k(x):
        nl.load(x[0:256, :])  # <- rule
    expect_rule(k, [np.zeros((256, 4), F32)], "partition-dim")


def test_partition_dim_on_ndarray():
    @nki.jit
    def k():
        nl.ndarray((129, 4), nl.float32, buffer=nl.sbuf)  # <- rule
    expect_rule(k, [], "partition-dim")


def _mm_kernel(kdim, m, n):
    @nki.jit
    def k():
        a = nl.zeros((kdim, m), nl.bfloat16)
        b = nl.zeros((kdim, n), nl.bfloat16)
        nisa.nc_matmul(nl.ndarray((min(m, 128), n), nl.float32, buffer=nl.psum), a, b)  # <- rule
    return k


def test_matmul_contraction_over_128():
    # A 129-row SBUF tile is itself illegal; use a fake 256-partition core so that the matmul
    # contraction rule (the PE array's 128 rows) is what fires.
    err = expect_rule(_mm_kernel(129, 64, 64), [], "matmul-contraction",
                      hardware=HardwareConfig(partitions=256))
    assert "129 > 128" in str(err)


def test_matmul_stationary_free_over_128():
    expect_rule(_mm_kernel(128, 129, 64), [], "matmul-stationary-free")


def test_matmul_moving_free_over_512():
    expect_rule(_mm_kernel(128, 128, 513), [], "matmul-moving-free")


def test_matmul_operand_must_be_sbuf():
    @nki.jit
    def k():
        a = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
        b = nl.zeros((128, 128), nl.float32)
        nisa.nc_matmul(nl.ndarray((128, 128), nl.float32, buffer=nl.psum), a, b)  # <- rule
    expect_rule(k, [], "matmul-operand-sbuf")


def test_matmul_output_is_fp32_psum():
    @nki.jit
    def k(out):
        a = nl.full((128, 16), 1.0, nl.bfloat16)
        b = nl.full((128, 32), 2.0, nl.bfloat16)
        r = nl.ndarray((16, 32), nl.float32, buffer=nl.psum)
        assert nisa.nc_matmul(r, a, b) is r
        nl.store(out, value=nl.copy(r))
        return out
    out = nki.simulate(k)(np.zeros((16, 32), F32))
    assert np.all(out == 256.0)


def test_psum_capacity_8_banks():
    @nki.jit
    def k():
        tiles = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(8)]
        nl.zeros((128, 4), nl.float32, buffer=nl.psum)  # <- rule
        return tiles
    err = expect_rule(k, [], "psum-capacity")
    assert "8 banks" in str(err)


def test_psum_released_when_tiles_die():
    @nki.jit
    def k():
        for _ in nl.affine_range(20):
            t = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            del t
    nki.simulate(k)()
    assert nki.simulator.last_report().peak_psum_banks == 1


def test_sbuf_capacity():
    @nki.jit
    def k():
        keep = [nl.ndarray((128, 16384), nl.float32) for _ in range(3)]  # 3 x 64 KiB
        nl.ndarray((128, 16384), nl.float32)  # <- rule
        return keep
    err = expect_rule(k, [], "sbuf-capacity")
    assert "229376" in str(err)


def test_sbuf_capacity_is_per_generation():
    @nki.jit
    def k():
        return [nl.ndarray((128, 16384), nl.float32) for _ in range(3)]
    nki.simulate(k)()  # 192 KiB fits trn2 (224 KiB)
    small = HardwareConfig(name="small", sbuf_bytes_per_partition=128 * 1024)
    with pytest.raises(nki.NKIError, match="sbuf-capacity"):
        nki.simulate(k, hardware=small)()


def test_sbuf_freed_in_loops():
    @nki.jit
    def k(x):
        for _ in nl.affine_range(100):
            t = nl.load(x)
            t = nl.exp(t)
    nki.simulate(k)(np.zeros((128, 16384), F32))  # 64 KiB per tile, 100 iterations


def test_out_of_bounds_slice():
    @nki.jit
    def k(x):
        nl.load(x[0:128, 0:65])  # <- rule
    expect_rule(k, [np.zeros((128, 64), F32)], "out-of-bounds")


def test_out_of_bounds_index_expression():
    @nki.jit
    def k(x):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        nl.load(x[i_p + 64, i_f])  # <- rule
    expect_rule(k, [np.zeros((128, 64), F32)], "out-of-bounds")


def test_out_of_bounds_store():
    @nki.jit
    def k(out):
        nl.store(out[100:228, :], value=nl.zeros((128, 4), nl.float32))  # <- rule
    expect_rule(k, [np.zeros((200, 4), F32)], "out-of-bounds")


def test_mask_allows_partial_tile():
    @nki.jit
    def k(x, out):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(8)[None, :]
        for t in nl.affine_range(2):
            rows = t * 128 + i_p
            tile = nl.load(x[rows, i_f], mask=rows < 200)
            nl.store(out[rows, i_f], value=nl.multiply(tile, 2.0), mask=rows < 200)
        return out
    x = np.arange(1600, dtype=F32).reshape(200, 8)
    out = nki.simulate(k)(x, np.zeros_like(x))
    np.testing.assert_array_equal(out, 2 * x)


def test_read_only_input():
    @nki.jit
    def k(x):
        nl.store(x, value=nl.zeros((128, 4), nl.float32))  # <- rule
    x = np.zeros((128, 4), F32)
    x.flags.writeable = False
    err = expect_rule(k, [x], "read-only-input")
    assert "'x'" in str(err)


def test_read_only_input_through_run():
    @nki.jit
    def k(x, y):
        nl.store(y, value=nl.load(x))
        nl.store(x, value=nl.load(y))  # <- rule
    x = np.ones((8, 4), F32)
    x.flags.writeable = False
    y = np.zeros((8, 4), F32)
    with pytest.raises(nki.NKIError, match="read-only-input"):
        nki.simulator.run(k, [x, y], {})
    assert np.all(y == 1)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
def test_64bit_argument_refused(dtype):
    @nki.jit
    def k(x):
        return x
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(k)(np.zeros((4, 4), dtype))
    assert info.value.rule == "no-64-bit"
    assert "cast" in str(info.value) and "float32" in str(info.value)
    assert "test_nki_rules.py" in info.value.location


def test_64bit_dtype_in_kernel_refused():
    @nki.jit
    def k():
        nl.ndarray((4, 4), np.float64)  # <- rule
    expect_rule(k, [], "no-64-bit")


def test_reduce_over_partition_axis_refused():
    @nki.jit
    def k():
        nl.sum(nl.zeros((128, 4), nl.float32), axis=0)  # <- rule
    expect_rule(k, [], "reduce-free-axis")


def test_transpose_free_over_128():
    @nki.jit
    def k():
        nisa.nc_transpose(nl.ndarray((128, 64), nl.float32, buffer=nl.psum), nl.zeros((64, 256), nl.float32))  # <- rule
    expect_rule(k, [], "transpose-free")


def test_shape_mismatch():
    @nki.jit
    def k():
        nl.add(nl.zeros((128, 4), nl.float32), nl.zeros((128, 5), nl.float32))  # <- rule
    expect_rule(k, [], "shape-mismatch")


def test_load_from_sbuf_refused():
    @nki.jit
    def k():
        nl.load(nl.zeros((4, 4), nl.float32))  # <- rule
    expect_rule(k, [], "load-source")


def test_error_in_library_kernel_points_at_library_source():
    from nki.kernels import softmax
    with pytest.raises(nki.NKIError) as info:
        nki.simulate(softmax)(np.zeros((4, 70000), F32))  # row does not fit SBUF
    assert info.value.rule == "sbuf-capacity"
    assert info.value.location.split(":")[0].endswith("nki/kernels/softmax.py")


def test_nl_outside_kernel():
    with pytest.raises(nki.NKIError, match="no-kernel-run"):
        nl.zeros((4, 4), nl.float32)
