"""torch._scaled_mm / _scaled_mm_v2 on the device: one dequantizing kernel on every host (each
operand to fp32 times its scale, an fp32 matmul, the bias in fp32, one rounding), equal bit for
bit to the CPU's dequantizing path (the same CPU kernels run), with no CPU fallback.

float8_e4m3fn operands run on trn3's TensorE (the module's tests run in a process simulating trn3,
tests/conftest.py); trn2 multiplies float8_e5m2 and refuses float8_e4m3fn (the trn2 tests)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
pytestmark = pytest.mark.generation("trn3")


@pytest.fixture
def strict():
    torch_neuronx.set_strict_fallback(True)
    yield
    torch_neuronx.set_strict_fallback(False)


def operands(m: int, k: int, n: int, dtype_a=E4M3, dtype_b=E4M3, rowwise: bool = False, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 4).to(dtype_a)
    b = (torch.randn(n, k, generator=g) * 4).to(dtype_b).t()  # column-major, as the kernels want
    if rowwise:
        return a, b, torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5
    return a, b, torch.tensor(0.75), torch.tensor(1.5)


def dequantized(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """The reference, written out: what the device kernel computes."""
    out = (a.float() * scale_a) @ (b.float() * scale_b)
    if bias is not None:
        out = out + bias
    return out.to(out_dtype)


def on(device, *tensors):
    return [t.to(device) if t is not None else None for t in tensors]


@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("dtypes", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E5M2)], ids=["e4m3", "e4m3xe5m2", "e5m2"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("bias_dtype", [None, torch.bfloat16, torch.float32])
def test_scaled_mm_equals_the_dequantized_product(device, strict, rowwise, dtypes, out_dtype, bias_dtype):
    if dtypes[0] != dtypes[1] and rowwise:
        pytest.skip("the CPU's rowwise path takes one float8 dtype for both operands")
    a, b, sa, sb = operands(48, 96, 40, *dtypes, rowwise=rowwise)
    bias = None if bias_dtype is None else torch.randn(40).to(bias_dtype)
    for _ in range(2):  # the first launch and a planned one
        out = torch._scaled_mm(*on(device, a, b, sa, sb), bias=on(device, bias)[0], out_dtype=out_dtype)
        assert out.device.type == "neuron" and out.dtype == out_dtype and out.shape == (48, 40)
        # Bit for bit: the same CPU kernels (conversion, multiply, fp32 matmul) compute the reference.
        torch.testing.assert_close(out.cpu(), dequantized(a, b, sa, sb, bias, out_dtype), rtol=0, atol=0)
    with torch.backends.mkldnn.flags(enabled=False):  # the CPU's dequantizing path
        cpu = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    torch.testing.assert_close(out.cpu(), cpu, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}
    assert "aten::_scaled_mm" in torch_neuronx.get_executed_ops()


def test_the_result_does_not_depend_on_the_hosts_onednn_path(device, strict):
    """On AMX hosts the CPU's default (oneDNN) rounds tensorwise products differently; the device
    always dequantizes. Large K makes the paths part where they can."""
    a, b, sa, sb = operands(64, 2048, 64, seed=3)
    out = torch._scaled_mm(*on(device, a, b, sa, sb), out_dtype=torch.bfloat16).cpu()
    with torch.backends.mkldnn.flags(enabled=True):
        out_mkldnn_on = torch._scaled_mm(*on(device, a, b, sa, sb), out_dtype=torch.bfloat16).cpu()
    torch.testing.assert_close(out, dequantized(a, b, sa, sb), rtol=0, atol=0)
    torch.testing.assert_close(out_mkldnn_on, out, rtol=0, atol=0)


def test_scaled_mm_v2_runs_on_the_device(device, strict):
    a, b, sa, sb = operands(32, 64, 16, rowwise=True)
    rowwise = F.ScalingType.RowWise.value
    out = torch.ops.aten._scaled_mm_v2(*on(device, a, b), [sa.to(device)], [rowwise], [], [sb.to(device)],
                                       [rowwise], [], None, torch.bfloat16)
    torch.testing.assert_close(out.cpu(), dequantized(a, b, sa, sb), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_fp8_output_and_default_out_dtype(device, strict):
    a, b, sa, sb = operands(16, 32, 16)
    out = torch._scaled_mm(*on(device, a, b, sa, sb))  # out_dtype defaults to the operands' dtype
    with torch.backends.mkldnn.flags(enabled=False):
        cpu = torch._scaled_mm(a, b, sa, sb)
    assert out.dtype == cpu.dtype == E4M3
    assert torch.equal(out.cpu().view(torch.uint8), cpu.view(torch.uint8))


def test_bad_scales_and_shapes_raise_and_the_device_stays_usable(device):
    a, b, sa, sb = operands(16, 32, 8)
    with pytest.raises((RuntimeError, ValueError), match="(?i)scal"):
        torch._scaled_mm(*on(device, a, b), torch.ones(3, 3, device=device), sb.to(device), out_dtype=torch.bfloat16)
    with pytest.raises((RuntimeError, ValueError), match="cannot be multiplied"):
        torch._scaled_mm(*on(device, a, a.t().contiguous().t()[:16], sa, sb), out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="scale_result is not supported"):
        torch._scaled_mm(*on(device, a, b, sa, sb), scale_result=torch.tensor(1.0, device=device))
    out = torch._scaled_mm(*on(device, a, b, sa, sb), out_dtype=torch.float32)
    torch.testing.assert_close(out.cpu(), dequantized(a, b, sa, sb, out_dtype=torch.float32), rtol=0, atol=0)


def test_the_profiler_costs_scaled_mm_at_the_fp8_rate(device, tmp_path):
    import pyarrow.parquet as pq
    from torch.profiler import ProfilerActivity, profile

    from nki.simulator.cost_model import tensor_rate
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, cost_model
    from torch_neuronx.profiling.graph_estimate import Assumptions
    a, b, sa, sb = on(device, *operands(512, 1024, 1024))
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), a16 @ b16  # first launches outside
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=tmp_path)
    exporter = NeuronProfiler(nc)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=exporter.export_trace):
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), a16 @ b16
        torch.neuron.synchronize()
    ops = {r["op_name"]: r for r in pq.read_table(exporter.last_output_dir / "FrameworkOp.parquet").to_pylist()}
    fp8, bf16 = ops["aten::_scaled_mm"], ops["aten::mm"]
    assert fp8["execution"] == "native" and fp8["estimated_engine"] == "TensorE"
    assert fp8["estimated_flops"] == bf16["estimated_flops"] == 2 * 512 * 1024 * 1024
    hw = cost_model.hardware(nc.target)
    fixed = Assumptions().kernel_overhead_s * 1e6
    ratio = (fp8["estimated_chip_time_us"] - fixed) / (bf16["estimated_chip_time_us"] - fixed)
    assert ratio == pytest.approx(tensor_rate(hw, "bfloat16") / tensor_rate(hw, "float8_e4m3fn"))


@pytest.mark.generation("trn2")
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
def test_trn2_multiplies_e5m2_bit_for_bit(device, strict, rowwise):
    a, b, sa, sb = operands(48, 96, 40, E5M2, E5M2, rowwise=rowwise)
    out = torch._scaled_mm(*on(device, a, b, sa, sb), out_dtype=torch.bfloat16)
    torch.testing.assert_close(out.cpu(), dequantized(a, b, sa, sb), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn2")
@pytest.mark.parametrize("dtypes", [(E4M3, E4M3), (E5M2, E4M3)], ids=["e4m3", "e5m2xe4m3"])
def test_trn2_refuses_e4m3fn_operands_naming_the_generation_and_the_fix(device, strict, dtypes):
    a, b, sa, sb = on(device, *operands(16, 32, 16, *dtypes))
    before = torch.neuron.memory_allocated()
    message = r"float8_e4m3fn operands do not run on the TensorE of trn2 .*NCC_EVRF051.*generation:trn3"
    with pytest.raises(TypeError, match=r"torch\._scaled_mm on neuron: " + message):
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"torch\._scaled_mm_v2 on neuron: " + message):
        torch.ops.aten._scaled_mm_v2(a, b, [sa], [0], [], [sb], [0], [], None, torch.bfloat16, [], False)
    assert torch.neuron.memory_allocated() == before and torch_neuronx.get_fallback_ops() == {}
    e5m2 = on(device, *operands(16, 32, 16, E5M2, E5M2))  # the device stays usable
    torch.testing.assert_close(torch._scaled_mm(*e5m2, out_dtype=torch.float32).cpu(),
                               dequantized(*operands(16, 32, 16, E5M2, E5M2), out_dtype=torch.float32), rtol=0, atol=0)
