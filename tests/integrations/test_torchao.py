"""TorchAO's recipes on ``neuron`` (torchao pinned in constraints.txt): quantized inference and
float8 training give the CPU's results bit for bit, where the CPU takes its dequantizing
``_scaled_mm`` path (``torch.backends.mkldnn.flags(enabled=False)``; the device always does)."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx

torchao = pytest.importorskip("torchao")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torchao.float8 import Float8LinearConfig, convert_to_float8_training, float8_utils  # noqa: E402
from torchao.quantization import (  # noqa: E402
    Float8DynamicActivationFloat8WeightConfig,
    Float8WeightOnlyConfig,
    PerRow,
    PerTensor,
    quantize_,
)


@pytest.fixture
def strict():
    torch_neuronx.set_strict_fallback(True)
    yield
    torch_neuronx.set_strict_fallback(False)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).to(torch.bfloat16)


class DequantizingScaledMM(TorchDispatchMode):
    """The CPU reference: PyTorch's CPU kernels as by default, with ``_scaled_mm`` taking its
    dequantizing path (the device's, on every host) instead of oneDNN's."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._scaled_mm.default:
            with torch.backends.mkldnn.flags(enabled=False):
                return func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def dynamic(granularity):
    # set_inductor_config=False: the default sets Inductor's global options (not this test's to keep).
    return Float8DynamicActivationFloat8WeightConfig(granularity=granularity, set_inductor_config=False)


@pytest.mark.parametrize("config", [dynamic(PerTensor()), dynamic(PerRow()),
                                    Float8WeightOnlyConfig(set_inductor_config=False)],
                         ids=["dynamic-per-tensor", "dynamic-per-row", "weight-only"])
def test_float8_inference_configs_match_the_cpu(device, strict, config):
    cpu, dev = model(), model().to(device)
    quantize_(cpu, config)
    quantize_(dev, config)  # accepted: the hardware check knows neuron devices (integrations/torchao.py)
    assert type(dev[0].weight).__name__ == type(cpu[0].weight).__name__
    assert dev[0].weight.qdata.device.type == "neuron"
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    for _ in range(2):
        with DequantizingScaledMM():  # first: its oneDNN switch is process-wide
            expected = cpu(x)
        out = dev(x.to(device))
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)  # the same CPU kernels
    assert torch_neuronx.get_fallback_ops() == {}


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


RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_float8_training_matches_the_cpu_without_fallback(device, strict, recipe):
    config = Float8LinearConfig.from_recipe_name(recipe)
    cpu, dev = model(), model()
    convert_to_float8_training(cpu, config=config)
    convert_to_float8_training(dev, config=config)
    dev = dev.to(device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    with DequantizingScaledMM():  # before the device runs: its oneDNN switch is process-wide
        expected = train_step(cpu, x)
    out = train_step(dev, x.to(device))
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)  # the same CPU kernels
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}  # the scales too (float32_scale)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_compiled_float8_training_matches_compiled_cpu(device, strict, recipe):
    config = Float8LinearConfig.from_recipe_name(recipe)
    cpu, dev = model(), model()
    convert_to_float8_training(cpu, config=config)
    convert_to_float8_training(dev, config=config)
    dev = dev.to(device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    out = train_step(torch.compile(dev, backend="neuron"), x.to(device)).cpu()
    torch.neuron.synchronize()  # the flag below is process-wide: no device work may be in flight
    # Inductor calls _scaled_mm's kernel directly (no dispatch mode sees it): oneDNN off throughout.
    with torch.backends.mkldnn.flags(enabled=False):
        expected = train_step(torch.compile(cpu), x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


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
