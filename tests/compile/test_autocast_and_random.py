"""Autocast and random operations inside neuron-compiled graphs, against the CPU."""
import pytest
import torch

import torch_neuronx  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def mixed_precision(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.dtype, torch.Tensor]:
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        y = x @ w
        z = torch.relu(y) + 1
    return y.dtype, z * 2


def test_autocast_inside_a_compiled_region_matches_cpu_autocast():
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    ref_dtype, ref = mixed_precision(x, w)
    dtype, out = torch.compile(mixed_precision, backend="neuron")(x.to("neuron"), w.to("neuron"))
    assert dtype == ref_dtype == out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


def dropout(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(x, 0.5, training=True) * 3


def test_dropout_draws_from_the_cpu_generator_like_cpu_inductor():
    x = torch.ones(1000)
    torch.manual_seed(0)
    cpu = torch.compile(dropout)(x)
    compiled = torch.compile(dropout, backend="neuron")
    torch.default_generator.manual_seed(0)  # the CPU generator alone decides the mask
    first = compiled(x.to("neuron")).cpu()
    second = compiled(x.to("neuron")).cpu()
    torch.testing.assert_close(first, cpu)
    assert not torch.equal(first, second)  # the generator advances between calls
    assert set(first.unique().tolist()) == {0.0, 6.0}
