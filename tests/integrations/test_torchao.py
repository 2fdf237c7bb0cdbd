"""TorchAO's recipes on ``neuron`` (torchao pinned in constraints.txt): quantized inference and
float8 training give the CPU's results bit for bit, where the CPU takes its dequantizing
``_scaled_mm`` path (cpu_dequantizing_scaled_mm; the device always does).

TorchAO's recipes quantize to float8_e4m3fn, which TensorE multiplies from trn3 on: those tests
run in a process simulating trn3 (``@pytest.mark.generation``, tests/conftest.py); on trn2 they
are refused, and the float8_e5m2 recipes run."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import torch_neuronx
from torch_neuronx.testing.float8_reference import cpu_dequantizing_scaled_mm

torchao = pytest.importorskip("torchao")
from torchao.float8 import Float8LinearConfig, convert_to_float8_training, float8_utils  # noqa: E402
from torchao.quantization import (  # noqa: E402
    Float8DynamicActivationFloat8WeightConfig,
    Float8WeightOnlyConfig,
    Int8DynamicActivationInt8WeightConfig,
    Int8DynamicActivationIntxWeightConfig,
    Int8WeightOnlyConfig,
    IntxWeightOnlyConfig,
    PerGroup,
    PerRow,
    PerTensor,
    quantize_,
)
from torchao.quantization.qat import QATConfig  # noqa: E402


@pytest.fixture
def strict():
    torch_neuronx.set_strict_fallback(True)
    yield
    torch_neuronx.set_strict_fallback(False)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).to(torch.bfloat16)


def dynamic(granularity):
    # set_inductor_config=False: the default sets Inductor's global options (not this test's to keep).
    return Float8DynamicActivationFloat8WeightConfig(granularity=granularity, set_inductor_config=False)


@pytest.mark.parametrize("config", [dynamic(PerTensor()), dynamic(PerRow()),
                                    Float8WeightOnlyConfig(set_inductor_config=False)],
                         ids=["dynamic-per-tensor", "dynamic-per-row", "weight-only"])
@pytest.mark.generation("trn3")
def test_float8_inference_configs_match_the_cpu(device, strict, config):
    cpu, dev = model(), model().to(device)
    quantize_(cpu, config)
    quantize_(dev, config)  # accepted: the hardware check knows neuron devices (integrations/torchao.py)
    assert type(dev[0].weight).__name__ == type(cpu[0].weight).__name__
    assert dev[0].weight.qdata.device.type == "neuron"
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    for _ in range(2):
        with cpu_dequantizing_scaled_mm():
            expected = cpu(x)
        out = dev(x.to(device))
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)  # the same CPU kernels
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn3")
def test_quantized_weights_round_trip_through_a_state_dict(device, tmp_path):
    dev = model().to(device)
    quantize_(dev, dynamic(PerRow()))
    torch.save(dev.state_dict(), tmp_path / "fp8.pt")
    again = model().to(device)
    quantize_(again, dynamic(PerRow()))
    again.load_state_dict(torch.load(tmp_path / "fp8.pt", weights_only=False))
    for a, b in zip(dev.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a.qdata.cpu().view(torch.uint8), b.qdata.cpu().view(torch.uint8)) \
            if hasattr(a, "qdata") else torch.equal(a.cpu(), b.cpu())
    x = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    torch.testing.assert_close(again(x).cpu(), dev(x).cpu(), rtol=0, atol=0)


def train_step(module, x):
    out = module(x)
    out.float().square().mean().backward()
    return out


def float8_pair(config: Float8LinearConfig, device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model converted to float8 training, on the CPU and on the device."""
    cpu, dev = model(), model()
    convert_to_float8_training(cpu, config=config)
    convert_to_float8_training(dev, config=config)
    return cpu, dev.to(device)


RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.generation("trn3")
def test_float8_training_matches_the_cpu_without_fallback(device, strict, recipe):
    cpu, dev = float8_pair(Float8LinearConfig.from_recipe_name(recipe), device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    with cpu_dequantizing_scaled_mm():
        expected = train_step(cpu, x)
    out = train_step(dev, x.to(device))
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)  # the same CPU kernels
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}  # the scales too (float32_scale)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.generation("trn3")
def test_compiled_float8_training_matches_compiled_cpu(device, strict, recipe):
    cpu, dev = float8_pair(Float8LinearConfig.from_recipe_name(recipe), device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    out = train_step(torch.compile(dev, backend="neuron"), x.to(device)).cpu()
    with cpu_dequantizing_scaled_mm():
        expected = train_step(torch.compile(cpu), x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


INTEGER_CONFIGS = {
    "int8-weight-only": Int8WeightOnlyConfig(set_inductor_config=False),  # (as dynamic() says)
    "int8-dynamic": Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
    "int4-weight-only": IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
}


@pytest.mark.parametrize("name", INTEGER_CONFIGS)
def test_integer_quantization_configs_match_the_cpu_and_round_trip(device, strict, tmp_path, name):
    config = INTEGER_CONFIGS[name]
    cpu, dev = model(), model().to(device)
    quantize_(cpu, config)
    quantize_(dev, config)
    assert type(dev[0].weight) is type(cpu[0].weight) and dev[0].weight.qdata.device.type == "neuron"
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    for _ in range(2):
        torch.testing.assert_close(dev(x.to(device)).cpu(), cpu(x), rtol=0, atol=0)  # the same CPU kernels
    torch.save(dev.state_dict(), tmp_path / "q.pt")
    again = model().to(device)
    quantize_(again, config)
    again.load_state_dict(torch.load(tmp_path / "q.pt", weights_only=False))
    torch.testing.assert_close(again(x.to(device)).cpu(), cpu(x), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_qat_prepare_train_convert_matches_the_cpu(device, strict):
    base = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
    results = {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).to(where)
        quantize_(m, QATConfig(base, step="prepare"))  # fake-quantized linears
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        losses = []
        for _ in range(3):
            loss = m(torch.randn(16, 64, generator=g).to(where)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach().cpu())
        quantize_(m, QATConfig(base, step="convert"))  # the real quantized weights
        results[where] = torch.stack(losses), m(torch.randn(8, 64, generator=g).to(where)).detach().cpu(), m
    (cpu_losses, cpu_out, cpu), (dev_losses, dev_out, dev) = results["cpu"], results[device]
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=0, atol=0)
    torch.testing.assert_close(dev_out, cpu_out, rtol=0, atol=0)
    assert type(dev[0].weight).__name__ == type(cpu[0].weight).__name__ == "IntxUnpackedToInt8Tensor"
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.parametrize("optimizer", ["AdamW8bit", "AdamWFp8", "AdamW4bit"])
def test_low_bit_optimizers_match_the_cpu(device, strict, optimizer):
    import torchao.optim
    weights, states = {}, {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        m = torch.nn.Linear(256, 256).to(where)
        opt = getattr(torchao.optim, optimizer)(m.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            m(torch.randn(8, 256, generator=g).to(where)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        weights[where] = m.weight.detach().cpu()
        state = opt.state[m.weight]["exp_avg"]  # the optimizer's low-bit state subclass
        assert state.device.type == torch.device(where).type
        states[where] = state.dequantize().cpu()
    torch.testing.assert_close(weights[device], weights["cpu"], rtol=0, atol=0)
    torch.testing.assert_close(states[device], states["cpu"], rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def e5m2_config(recipe: str) -> Float8LinearConfig:
    """The recipe with every cast in float8_e5m2, the float8 format trn2's TensorE multiplies."""
    config = Float8LinearConfig.from_recipe_name(recipe)
    e5m2 = {name: dataclasses.replace(getattr(config, name), target_dtype=torch.float8_e5m2)
            for name in ("cast_config_input", "cast_config_weight", "cast_config_grad_output",
                         "cast_config_input_for_grad_weight", "cast_config_weight_for_grad_input",
                         "cast_config_grad_output_for_grad_weight")}
    return dataclasses.replace(config, **e5m2)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.generation("trn2")
def test_float8_e5m2_training_runs_on_trn2_and_matches_the_cpu(device, strict, recipe):
    cpu, dev = float8_pair(e5m2_config(recipe), device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    with cpu_dequantizing_scaled_mm():
        expected = train_step(cpu, x)
    out = train_step(dev, x.to(device))
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn2")
def test_float8_e4m3fn_is_refused_on_trn2_naming_the_fix(device, strict):
    dev = model().to(device)
    convert_to_float8_training(dev)  # TorchAO's default: float8_e4m3fn forward casts
    x = torch.randn(32, 64, dtype=torch.bfloat16, device=device)
    before = torch.neuron.memory_allocated()
    with pytest.raises(TypeError, match=r"_scaled_mm on neuron: float8_e4m3fn operands do not run on the "
                                        r"TensorE of trn2 .*NCC_EVRF051.*generation:trn3"):
        dev(x)
    assert torch.neuron.memory_allocated() == before  # nothing kept by the refused call
    quantize_(dev, dynamic(PerRow()))  # inference configs are refused alike, at the first matmul
    with pytest.raises(TypeError, match="float8_e4m3fn operands do not run on the TensorE of trn2"):
        dev(x)
    a, one = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn), torch.ones((), device=device)
    compiled = torch.compile(lambda a, b: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), backend="neuron")
    with pytest.raises(Exception, match="float8_e4m3fn operands do not run on the TensorE of trn2"):
        compiled(a, a.t())  # refused by the compiler's lowering, as eager refuses it
    torch._dynamo.reset()
    torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)  # the device stays usable


def float8_maxima_and_edges() -> torch.Tensor:
    """Every non-negative bfloat16 and float16, a million log-uniform float32 amaxes, and the
    values around TorchAO's EPS = 1e-12 where its float64 clamp acts."""
    bits = torch.arange(0, 1 << 15, dtype=torch.int16)
    g = torch.Generator().manual_seed(0)
    exponent = torch.empty(1_000_000).uniform_(-130, 128, generator=g)
    eps = torch.tensor(1e-12, dtype=torch.float32)
    around = [torch.nextafter(eps, torch.tensor(d)) for d in (0.0, 1.0)] + [eps, torch.tensor(0.0)]
    return torch.cat([bits.view(torch.bfloat16).float(), bits.view(torch.float16).float(),
                      torch.exp2(exponent), torch.stack(around), torch.tensor([float("inf"), float("nan")])])


@pytest.mark.parametrize("float8_dtype", sorted(float8_utils.FP8_TYPES, key=str), ids=str)
def test_float32_scales_equal_torchaos_float64_scales(float8_dtype):
    from torch_neuronx.integrations.torchao import float32_scale
    amax = float8_maxima_and_edges()
    original = float8_utils.amax_to_scale.__wrapped__  # TorchAO's, in float64
    expected = original(amax, float8_dtype)
    got = float32_scale(amax, float8_dtype, float8_utils.EPS)
    assert got.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_float8_scales_on_the_device_take_the_float32_path(device, strict):
    amax = float8_maxima_and_edges()[::97].to(device)
    for power_of_2 in (False, True):
        got = float8_utils.amax_to_scale(amax, torch.float8_e4m3fn, round_scales_to_power_of_2=power_of_2)
        expected = float8_utils.amax_to_scale.__wrapped__(amax.cpu(), torch.float8_e4m3fn, power_of_2)
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    assert torch_neuronx.get_fallback_ops() == {}


def test_the_hardware_check_is_wrapped_once_and_still_refuses_without_neuron(monkeypatch):
    import torchao.float8.inference as inference

    from torch_neuronx.integrations import torchao as integration
    assert inference._check_hardware_support.__torch_neuronx_wrapped__
    integration._patch_inference(inference)  # installing again does not wrap twice
    assert not hasattr(inference._check_hardware_support.__wrapped__, "__torch_neuronx_wrapped__")
    monkeypatch.setattr(torch.neuron, "is_available", lambda: False)
    if not torch.cuda.is_available() and not torch.xpu.is_available():
        with pytest.raises(AssertionError, match="Float8 dynamic quantization requires"):
            inference._check_hardware_support((PerTensor(), PerTensor()))


# ------------------------------------------------------------------------------------- MX (trn3)
def mx_model() -> torch.nn.Module:
    # No biases: TorchAO's MXFP8 training linear leaves them without gradients on every device.
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False), torch.nn.GELU(),
                               torch.nn.Linear(128, 64, bias=False)).to(torch.bfloat16)


def mx_inference(dtype, kernel_preference=None):
    from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig
    from torchao.quantization.quantize_.common import KernelPreference
    return MXDynamicActivationMXWeightConfig(activation_dtype=dtype, weight_dtype=dtype,
                                             kernel_preference=kernel_preference or KernelPreference.AUTO)


@pytest.mark.generation("trn3")
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float4_e2m1fn_x2], ids=["mxfp8", "mxfp4"])
def test_mx_inference_runs_the_block_scaled_matmul_on_trn3(device, strict, dtype):
    from torchao.quantization.quantize_.common import KernelPreference
    dev, cpu = mx_model().to(device), mx_model()
    quantize_(dev, mx_inference(dtype))  # AUTO: torch._scaled_mm / scaled_mm with E8M0 block scales
    quantize_(cpu, mx_inference(dtype, KernelPreference.EMULATED))  # dequantize, then a bf16 matmul
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    torch_neuronx.clear_op_tracking()
    out = dev(x.to(device)).cpu()
    # The emulated recipe dequantizes exactly into bf16 and the bf16 matmul accumulates in fp32
    # and rounds once, as the device's MX kernel does: equal bit for bit.
    torch.testing.assert_close(out, cpu(x), rtol=0, atol=0)
    assert {"aten::_scaled_mm", "aten::_scaled_mm_v2"} & set(torch_neuronx.get_executed_ops())
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn3")
@pytest.mark.parametrize("wgrad_with_hp", [False, True], ids=["mxfp8", "mxfp8-wgrad-hp"])
def test_mxfp8_training_runs_on_trn3_and_matches_the_emulated_recipe(device, strict, wgrad_with_hp):
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    auto = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)
    emulated = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL)
    dev, cpu = mx_model().to(device), mx_model()
    quantize_(dev, dataclasses.replace(auto, wgrad_with_hp=wgrad_with_hp))
    quantize_(cpu, dataclasses.replace(emulated, wgrad_with_hp=wgrad_with_hp))
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    expected = train_step(cpu, x)
    torch_neuronx.clear_op_tracking()
    out = train_step(dev, x.to(device))
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_executed_ops().get("aten::_scaled_mm", 0) >= 4  # forward and backward gemms
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn3")
def test_compiled_mxfp8_training_on_trn3_equals_inductors_emulated_recipe(device, strict):
    """The compiled recipe computes, pads and swizzles its E8M0 scales in the graph (carried as
    bytes: compile/bit_carriers.py); Inductor compiles the emulated recipe on the CPU. Both fuse
    the GELU the same way: equal bit for bit."""
    from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe
    dev, cpu = mx_model().to(device), mx_model()
    quantize_(dev, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL))
    quantize_(cpu, MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_EMULATED_RCEIL))
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    expected = train_step(torch.compile(cpu, backend="inductor"), x)
    graphs = torch_neuronx.get_dynamo_metrics()["graphs"]
    out = train_step(torch.compile(dev, backend="neuron"), x.to(device))
    assert torch_neuronx.get_dynamo_metrics()["graphs"] > graphs
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn3")
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float4_e2m1fn_x2], ids=["mxfp8", "mxfp4"])
def test_compiled_mx_inference_on_trn3_equals_the_eager_emulated_recipe(device, strict, dtype):
    """Inductor cannot compile the emulated MX recipe on the CPU (no C++ type for E8M0, PyTorch
    2.13), so the reference is eager. Two linears without an activation between: a cast of an
    activation fused into the graph would round unlike eager's bf16 activation."""
    from torchao.quantization.quantize_.common import KernelPreference

    def linears() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 128, bias=False),
                                   torch.nn.Linear(128, 64, bias=False)).to(torch.bfloat16)

    dev, cpu = linears().to(device), linears()
    quantize_(dev, mx_inference(dtype))
    quantize_(cpu, mx_inference(dtype, KernelPreference.EMULATED))
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        out = torch.compile(dev, backend="neuron")(x.to(device))
        torch.testing.assert_close(out.cpu(), cpu(x), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.generation("trn2")
def test_mx_is_refused_on_trn2_naming_trn3_and_the_emulated_choice(device, strict):
    from torchao.quantization.quantize_.common import KernelPreference
    dev = mx_model().to(device)
    quantize_(dev, mx_inference(torch.float4_e2m1fn_x2))
    x = torch.randn(16, 64, dtype=torch.bfloat16, device=device)
    with pytest.raises(TypeError, match=r"MX \(block-scaled\) matmuls run on NeuronCore-v4's TensorE, not on "
                                        r"trn2's.*generation:trn3.*KernelPreference.EMULATED"):
        dev(x)
    emulated = mx_model().to(device)  # the emulated kernel choice runs on every generation
    quantize_(emulated, mx_inference(torch.float4_e2m1fn_x2, KernelPreference.EMULATED))
    cpu = mx_model()
    quantize_(cpu, mx_inference(torch.float4_e2m1fn_x2, KernelPreference.EMULATED))
    torch.testing.assert_close(emulated(x).cpu(), cpu(x.cpu()), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


# ------------------------------------------------------------------------- a small GPT, N steps
def float8_gpt():
    from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT
    model = TinyGPT(GPTConfig()).to(torch.bfloat16)
    # lm_head shares the embedding's weight: kept in bf16 (TorchAO's usual filter of the output layer).
    return convert_to_float8_training(model, module_filter_fn=lambda _, fqn: fqn != "lm_head")


@pytest.mark.generation("trn3")
def test_float8_tiny_gpt_tracks_bf16_and_equals_the_cpu_over_30_steps(device, strict):
    from torch_neuronx.testing.parity import train
    from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches
    batches = make_batches(6, 8, 64, 256, seed=0)
    with cpu_dequantizing_scaled_mm():
        cpu_losses, cpu_state = train(float8_gpt, batches, "cpu", steps=30)
    fp8_losses, fp8_state = train(float8_gpt, batches, device, steps=30)
    bf16_losses, _ = train(lambda: TinyGPT(GPTConfig()).to(torch.bfloat16), batches, device, steps=30)
    assert fp8_losses == cpu_losses  # the same recipe on the CPU, bit for bit, step after step
    for name, value in fp8_state.items():
        torch.testing.assert_close(value, cpu_state[name], rtol=0, atol=0, msg=name)
    assert fp8_losses[-1] < fp8_losses[0] - 0.5  # it trains
    # and tracks bf16 training: within 3% of its loss at every step.
    assert max(abs(f - b) / b for f, b in zip(fp8_losses, bf16_losses)) < 0.03
    assert torch_neuronx.get_fallback_ops() == {}
    assert torch_neuronx.get_executed_ops().get("aten::_scaled_mm", 0) >= 30 * 8 * 3  # 8 float8 linears
