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


def host_scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16):
    """The CPU's dequantizing ``_scaled_mm`` (oneDNN off): the device's kernel, the same summation
    order (the written-out reference may sum otherwise, for some layouts, by one ulp)."""
    with torch.backends.mkldnn.flags(enabled=False):
        return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)


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
    torch.testing.assert_close(out.cpu(), host_scaled_mm(a, b, sa, sb, out_dtype=torch.float32), rtol=0, atol=0)


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


# --------------------------------------------------------------------------- MX (block scales)
def swizzled(scales: torch.Tensor) -> torch.Tensor:
    """[rows, blocks] E8M0 scales in cuBLAS's 32_4_4 layout (TorchAO's to_blocked, written out)."""
    rows, blocks = scales.shape
    padded = torch.zeros((rows + 127) // 128 * 128, (blocks + 3) // 4 * 4, dtype=torch.uint8)
    padded[:rows, :blocks] = scales.view(torch.uint8)
    tiles = padded.view(-1, 128, padded.shape[1] // 4, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1).view(torch.float8_e8m0fnu)


E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def mx_operand(rows: int, k: int, dtype, seed: int):
    """Random MX data [rows, K] (fp4: packed two a byte, low nibble first) with [rows, K/32]
    E8M0 scales, and its values in fp32."""
    g = torch.Generator().manual_seed(seed)
    exponents = torch.randint(120, 134, (rows, k // 32), generator=g, dtype=torch.uint8)
    factors = torch.exp2(exponents.float() - 127).repeat_interleave(32, 1)
    if dtype == torch.float4_e2m1fn_x2:
        codes = torch.randint(0, 16, (rows, k), generator=g, dtype=torch.uint8)
        data = (codes[:, 0::2] | codes[:, 1::2] << 4).view(torch.float4_e2m1fn_x2)
        values = E2M1[codes.long()]
    else:
        data = (torch.randn(rows, k, generator=g) * 3).to(dtype)
        values = data.float()
    return data, exponents.view(torch.float8_e8m0fnu), values * factors


MX_DTYPES = [E4M3, E5M2, torch.float4_e2m1fn_x2]


@pytest.mark.parametrize("dtype", MX_DTYPES, ids=["mxfp8-e4m3", "mxfp8-e5m2", "mxfp4"])
@pytest.mark.parametrize("api", ["_scaled_mm", "scaled_mm-swizzled", "scaled_mm-unswizzled"])
def test_mx_matmul_equals_the_block_dequantized_product(device, strict, dtype, api):
    m, k, n = 48, 128, 40
    a, sa, va = mx_operand(m, k, dtype, seed=1)
    bt, sb, vb = mx_operand(n, k, dtype, seed=2)
    bias = torch.randn(n).to(torch.bfloat16)
    expected = (va @ vb.t() + bias.float()).to(torch.bfloat16)  # fp32 products, one rounding
    a, b, bias = a.to(device), bt.to(device).t(), bias.to(device)  # b: [K, N] column-major
    if api == "_scaled_mm":
        if dtype == torch.float4_e2m1fn_x2:
            pytest.skip("torch._scaled_mm takes MXFP8; MXFP4 goes through F.scaled_mm")
        out = torch._scaled_mm(a, b, swizzled(sa).to(device), swizzled(sb).to(device), bias=bias,
                               out_dtype=torch.bfloat16)
    else:
        swizzle = api.endswith("-swizzled")
        scale = (lambda s: swizzled(s).to(device)) if swizzle else (lambda s: s.reshape(-1).to(device))
        block, kind = F.ScalingType.BlockWise1x32, F.SwizzleType.SWIZZLE_32_4_4 if swizzle else F.SwizzleType.NO_SWIZZLE
        out = F.scaled_mm(a, b, scale_a=scale(sa), scale_recipe_a=block, scale_b=scale(sb), scale_recipe_b=block,
                          swizzle_a=kind, swizzle_b=kind, bias=bias, output_dtype=torch.bfloat16)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_mx_bad_input_is_refused_and_the_device_stays_usable(device, strict):
    a, sa, _ = mx_operand(16, 64, E4M3, seed=1)
    bt, sb, _ = mx_operand(16, 64, E4M3, seed=2)
    a, b = a.to(device), bt.to(device).t()
    with pytest.raises(RuntimeError, match=r"scale_a has 2 E8M0 scales; MX blocks of 32 over 16 x 64 values take 512"):
        torch._scaled_mm(a, b, sa.reshape(-1)[:2].to(device), swizzled(sb).to(device), out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="MX blocks are 32 values along K; K = 48"):
        torch._scaled_mm(a[:, :48].contiguous(), b[:48], swizzled(sa[:, :2]).to(device),
                         swizzled(sb[:, :2]).to(device), out_dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="MX operands are float8_e4m3fn, float8_e5m2 .* got bfloat16"):
        torch._scaled_mm(a.to(torch.bfloat16), b.to(torch.bfloat16), swizzled(sa).to(device),
                         swizzled(sb).to(device), out_dtype=torch.bfloat16)
    out = torch._scaled_mm(a, b, swizzled(sa).to(device), swizzled(sb).to(device), out_dtype=torch.float32)
    assert out.shape == (16, 16) and torch_neuronx.get_fallback_ops() == {}


def test_mx_compiled_equals_eager(device, strict):
    a, sa, _ = mx_operand(32, 64, E4M3, seed=1)
    bt, sb, _ = mx_operand(32, 64, E4M3, seed=2)
    args = a.to(device), bt.to(device).t(), swizzled(sa).to(device), swizzled(sb).to(device)
    fn = lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron")(*args)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled.cpu(), fn(*args).cpu(), rtol=0, atol=0)


# ------------------------------------------------------------------------------------- grouped
def rowwise_operands(g, rows: int, k: int, dtype=E4M3):
    data = (torch.randn(rows, k, generator=g) * 3).to(dtype)
    return data, torch.rand(rows, generator=g) + 0.5


def test_scaled_grouped_mm_2d_x_3d_equals_group_by_group(device, strict):
    """The MoE layout: tokens [M, K] grouped by expert along M, expert weights [G, K, N]."""
    g = torch.Generator().manual_seed(0)
    offs = torch.tensor([16, 16, 48, 64], dtype=torch.int32)  # one empty group
    a, sa = rowwise_operands(g, 64, 32)
    experts = [rowwise_operands(g, 24, 32) for _ in range(4)]  # each [N, K], transposed below
    b = torch.stack([w for w, _ in experts]).transpose(-2, -1)  # [G, K, N] column-major
    sb = torch.stack([s for _, s in experts])
    out = torch._scaled_grouped_mm(*on(device, a, b, sa, sb, offs), out_dtype=torch.bfloat16)
    starts = [0, *offs.tolist()[:-1]]
    expected = torch.cat([host_scaled_mm(a[s:e], b[i], sa[s:e, None], sb[i][None, :])
                          for i, (s, e) in enumerate(zip(starts, offs.tolist()))])
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_scaled_grouped_mm_3d_x_3d_and_2d_x_2d_and_3d_x_2d_equal_group_by_group(device, strict):
    g = torch.Generator().manual_seed(1)
    # 3D x 3D: a batch of independent products.
    a = torch.stack([rowwise_operands(g, 16, 32)[0] for _ in range(3)])
    sa = torch.rand(3, 16, generator=g) + 0.5
    b = torch.stack([rowwise_operands(g, 8, 32)[0] for _ in range(3)]).transpose(-2, -1)
    sb = torch.rand(3, 8, generator=g) + 0.5
    out = torch._scaled_grouped_mm(*on(device, a, b, sa, sb), out_dtype=torch.bfloat16)
    expected = torch.stack([host_scaled_mm(a[i], b[i], sa[i, :, None], sb[i][None, :]) for i in range(3)])
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    # 2D x 2D: K grouped (weight gradients of an MoE), a [G, M, N] result.
    offs = torch.tensor([32, 64, 64, 96], dtype=torch.int32)
    a2 = (torch.randn(16, 96, generator=g) * 3).to(E4M3)
    b2 = (torch.randn(8, 96, generator=g) * 3).to(E4M3).t()
    sa2, sb2 = torch.rand(4 * 16, generator=g) + 0.5, torch.rand(4 * 8, generator=g) + 0.5
    out = torch._scaled_grouped_mm(*on(device, a2, b2, sa2, sb2, offs), out_dtype=torch.bfloat16)
    starts = [0, *offs.tolist()[:-1]]
    expected = torch.stack([
        host_scaled_mm(a2[:, s:e], b2[s:e], sa2[i * 16:(i + 1) * 16, None], sb2[None, i * 8:(i + 1) * 8])
        if e > s else torch.zeros(16, 8, dtype=torch.bfloat16)
        for i, (s, e) in enumerate(zip(starts, offs.tolist()))])
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    # 3D x 2D: N grouped.
    offs = torch.tensor([8, 24], dtype=torch.int32)
    a3 = torch.stack([rowwise_operands(g, 16, 32)[0] for _ in range(2)])
    sa3 = torch.rand(2, 16, generator=g) + 0.5
    b3 = (torch.randn(24, 32, generator=g) * 3).to(E4M3).t()
    sb3 = torch.rand(24, generator=g) + 0.5
    out = torch._scaled_grouped_mm(*on(device, a3, b3, sa3, sb3, offs), out_dtype=torch.bfloat16)
    expected = torch.cat([host_scaled_mm(a3[0], b3[:, :8], sa3[0, :, None], sb3[None, :8]),
                          host_scaled_mm(a3[1], b3[:, 8:], sa3[1, :, None], sb3[None, 8:])], dim=1)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_scaled_grouped_mm_compiled_equals_eager_and_bad_input_is_refused(device, strict):
    g = torch.Generator().manual_seed(2)
    offs = torch.tensor([8, 32], dtype=torch.int32)
    a, sa = rowwise_operands(g, 32, 32)
    b = torch.stack([rowwise_operands(g, 16, 32)[0] for _ in range(2)]).transpose(-2, -1)
    sb = torch.rand(2, 16, generator=g) + 0.5
    args = on(device, a, b, sa, sb, offs)
    fn = lambda a, b, sa, sb, offs: torch._scaled_grouped_mm(a, b, sa, sb, offs, out_dtype=torch.bfloat16)  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron")(*args)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled.cpu(), fn(*args).cpu(), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="offs has 3 groups, mat_b 2"):
        torch._scaled_grouped_mm(*args[:4], torch.tensor([8, 16, 32], dtype=torch.int32, device=device),
                                 out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="bias is not supported"):
        torch._scaled_grouped_mm(*args, bias=torch.zeros(16, device=device), out_dtype=torch.bfloat16)
    torch.testing.assert_close(fn(*args).cpu(), compiled.cpu(), rtol=0, atol=0)  # still usable


def test_the_profiler_costs_mx_at_the_mx_rate_and_counts_fp4_k(device, tmp_path):
    import pyarrow.parquet as pq
    from torch.profiler import ProfilerActivity, profile

    from nki.simulator.cost_model import tensor_rate
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, cost_model
    from torch_neuronx.profiling.graph_estimate import Assumptions
    m = k = n = 1024
    a, sa, _ = mx_operand(m, k, torch.float4_e2m1fn_x2, seed=1)
    bt, sb, _ = mx_operand(n, k, torch.float4_e2m1fn_x2, seed=2)
    block = F.ScalingType.BlockWise1x32
    fp4 = lambda: F.scaled_mm(a.to(device), bt.to(device).t(), scale_a=sa.reshape(-1).to(device),  # noqa: E731
                              scale_recipe_a=block, scale_b=sb.reshape(-1).to(device), scale_recipe_b=block,
                              output_dtype=torch.bfloat16)
    x16 = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    fp4(), x16 @ x16
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=tmp_path)
    exporter = NeuronProfiler(nc)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=exporter.export_trace):
        fp4(), x16 @ x16
        torch.neuron.synchronize()
    ops = {r["op_name"]: r for r in pq.read_table(exporter.last_output_dir / "FrameworkOp.parquet").to_pylist()}
    mx, bf16 = ops["aten::_scaled_mm_v2"], ops["aten::mm"]
    assert mx["estimated_engine"] == "TensorE"
    assert mx["estimated_flops"] == bf16["estimated_flops"] == 2 * m * k * n  # fp4's packed K counted twice
    hw = cost_model.hardware(nc.target)
    fixed = Assumptions().kernel_overhead_s * 1e6
    ratio = (mx["estimated_chip_time_us"] - fixed) / (bf16["estimated_chip_time_us"] - fixed)
    assert ratio == pytest.approx(tensor_rate(hw, "bfloat16") / tensor_rate(hw, "mx"))
    assert tensor_rate(hw, "mx") / tensor_rate(hw, "bfloat16") == pytest.approx(4, rel=0.01)  # trn3: 315 / 79
