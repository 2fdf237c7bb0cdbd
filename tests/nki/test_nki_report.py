"""Cost accounting: engines, FLOPs, DMA bytes, estimated times and the report API."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from helpers_nki import marked_line
from nki.simulator import TRN2, RunReport
from torch_neuronx.runtime import chips


@nki.jit
def mm_kernel(a, b, out):
    ta, tb = nl.load(a), nl.load(b)  # <- loads
    r = nl.ndarray(out.shape, nl.float32, buffer=nl.psum)
    nisa.nc_matmul(r, ta, tb)
    nl.store(out, value=nl.copy(r))
    return out


def run_mm(K, M, N, dtype):
    a = np.ones((K, M), dtype)
    b = np.ones((K, N), dtype)
    _, report = nki.simulator.run(mm_kernel, [a, b, np.zeros((M, N), np.float32)], {})
    return report


def test_matmul_on_tensor_engine_with_flops():
    report = run_mm(128, 96, 320, ml_dtypes.bfloat16)
    mm = [r for r in report.instructions if r.opcode == "matmul"]
    assert len(mm) == 1 and mm[0].engine == "TensorE"
    assert mm[0].flops == 2 * 96 * 320 * 128 == report.tensor_flops
    assert mm[0].dtype == "bfloat16" and mm[0].seconds > 0
    assert report.engine_instructions["TensorE"] == 1


def test_fp32_matmul_slower_than_bf16_and_fp8():
    t = {dt: run_mm(128, 128, 512, dt).engine_busy_seconds["TensorE"]
         for dt in (np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn)}
    assert t[np.float32] > t[ml_dtypes.bfloat16] > t[ml_dtypes.float8_e4m3fn]
    # 2*128*128*512 flops at one physical core's bf16 rate plus 64 cycles of the ScalarE clock
    expected = 2 * 128 * 128 * 512 / chips.TRN2.tensor_flops["bf16"] + 64 / chips.TRN2.engine_clock_hz["scalar"]
    assert t[ml_dtypes.bfloat16] == pytest.approx(expected)


@nki.jit
def lane_kernel(a, out):
    t = nl.load(a)
    s, e = nl.ndarray(t.shape, nl.float32), nl.ndarray(t.shape, nl.float32)
    nisa.tensor_scalar(s, t, np.multiply, 2.0, op1=np.add, operand1=1.0)  # VectorE, two steps
    nisa.activation(e, op=nl.exp, data=s)                                  # ScalarE
    nl.store(out, value=nl.add(e, s))                                       # VectorE, two tiles
    return out


def test_lane_instructions_cost_their_elements_at_the_published_data_path_rate():
    a = np.ones((128, 512), np.float32)
    _, report = nki.simulator.run(lane_kernel, [a, np.zeros_like(a)], {})
    overhead = 64 / chips.TRN2.engine_clock_hz["scalar"]
    seconds = {r.opcode.split("[")[0]: r.seconds for r in report.instructions if r.engine in ("VectorE", "ScalarE")}
    # [K2]: VectorE 256 fp32 elements read per cycle at 0.96 GHz, ScalarE 128 at 1.2 GHz; the two
    # chained tensor_scalar steps are one pass; tensor_tensor reads two tiles.
    assert seconds["tensor_scalar"] == pytest.approx(128 * 512 / (256 * 0.96e9) + overhead)
    assert seconds["activation"] == pytest.approx(128 * 512 / (128 * 1.2e9) + overhead)
    assert seconds["tensor_tensor"] == pytest.approx(2 * 128 * 512 / (256 * 0.96e9) + overhead)
    vector = next(r for r in report.instructions if r.engine == "VectorE")
    assert vector.flops == 2 * 128 * 512  # its FLOPs still count both steps


def test_load_counted_on_dma_with_bytes():
    report = run_mm(64, 32, 16, np.float32)
    loads = [r for r in report.instructions if r.opcode == "load"]
    assert [r.engine for r in loads] == ["DMA", "DMA"]
    assert [r.dma_bytes for r in loads] == [64 * 32 * 4, 64 * 16 * 4]
    stores = [r for r in report.instructions if r.opcode == "store"]
    assert stores[0].dma_bytes == 32 * 16 * 4
    assert report.dma_bytes == (64 * 32 + 64 * 16 + 32 * 16) * 4
    assert loads[0].location == marked_line(mm_kernel, "# <- loads")
    # One physical core's share of the chip's HBM bandwidth.
    expected = 64 * 32 * 4 / (chips.TRN2.hbm_bytes_per_s / chips.TRN2.physical_cores) + TRN2.dma_overhead_s
    assert loads[0].seconds == pytest.approx(expected)


def test_engine_attribution():
    @nki.jit
    def k(x):
        t = nl.load(x)
        nl.exp(t)                                   # ScalarE
        nl.add(t, t)                                # VectorE
        nl.sum(t, axis=1)                           # VectorE
        nisa.iota(nl.ndarray((128, 1), nl.int32), nl.arange(128)[:, None])  # GpSimd
        nisa.memset(nl.ndarray((128, 4), nl.float32), 0)                      # GpSimd
        nl.transpose(t)                             # TensorE
    nki.simulate(k)(np.ones((128, 64), np.float32))
    r = nki.simulator.last_report()
    assert dict(r.engine_instructions) == {"DMA": 1, "ScalarE": 1, "VectorE": 2, "GpSimd": 2, "TensorE": 1}
    assert r.opcode_counts["ScalarE.activation[exp]"] == 1
    assert r.opcode_counts["VectorE.tensor_reduce[add]"] == 1


def test_estimates_and_table():
    from nki.kernels import matmul
    a = np.ones((256, 256), ml_dtypes.bfloat16)
    nki.simulate(matmul)(a, a)
    r = nki.simulator.last_report()
    assert isinstance(r, RunReport)
    assert r.estimated_seconds > 0
    assert r.estimated_seconds == max(r.engine_busy_seconds.values())
    assert r.estimated_serial_seconds >= r.estimated_seconds
    assert r.simulated_wall_seconds > 0
    assert all(rec.location.split(":")[0].endswith("nki/kernels/matmul.py") for rec in r.instructions)
    text = str(r)
    assert "ESTIMATED" in text and "TensorE" in text and "DMA" in text
    d = r.to_dict()
    assert d["flops"] == r.flops and d["estimated_seconds"] == r.estimated_seconds
    assert sum(d["engine_instructions"].values()) == len(r.instructions)


def test_peak_memory_tracked():
    @nki.jit
    def k():
        a = nl.zeros((128, 1024), nl.float32)
        b = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        return a, b
    nki.simulate(k)()
    r = nki.simulator.last_report()
    assert r.peak_sbuf_bytes_per_partition == 4096 and r.peak_psum_banks == 1
