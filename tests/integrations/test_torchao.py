"""TorchAO's recipes on ``neuron`` (torchao pinned in constraints.txt): quantized inference and
float8 training give the CPU's results bit for bit, where the CPU takes its dequantizing
``_scaled_mm`` path (``torch.backends.mkldnn.flags(enabled=False)``; the device always does)."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx

torchao = pytest.importorskip("torchao")
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


def cpu_dequantizing():
    return torch.backends.mkldnn.flags(enabled=False)


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
        out = dev(x.to(device))
        with cpu_dequantizing():
            expected = cpu(x)
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


def test_float8_training_tensorwise_matches_the_cpu(device):
    from torchao.float8 import convert_to_float8_training
    cpu, dev = model(), model()
    convert_to_float8_training(cpu)
    convert_to_float8_training(dev)
    dev = dev.to(device)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    out = dev(x.to(device))
    out.float().square().mean().backward()
    with cpu_dequantizing():
        expected = cpu(x)
        expected.float().square().mean().backward()
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=0, atol=0)
    # The recipe's scales are computed in float64 (amax_to_scale), which runs on the host by the
    # dtype policy: reported fallbacks, until the device computes them (issue 52).
    assert set(torch_neuronx.get_fallback_ops()) <= {"aten::clamp", "aten::reciprocal", "aten::mul.Tensor"}


def test_the_hardware_check_is_wrapped_once_and_still_refuses_without_neuron(monkeypatch):
    import torchao.float8.inference as inference

    from torch_neuronx.integrations import torchao as integration
    assert inference._check_hardware_support.__torch_neuronx_wrapped__
    integration._patch(inference)  # installing again does not wrap twice
    assert not hasattr(inference._check_hardware_support.__wrapped__, "__torch_neuronx_wrapped__")
    monkeypatch.setattr(torch.neuron, "is_available", lambda: False)
    if not torch.cuda.is_available() and not torch.xpu.is_available():
        with pytest.raises(AssertionError, match="Float8 dynamic quantization requires"):
            inference._check_hardware_support((PerTensor(), PerTensor()))
