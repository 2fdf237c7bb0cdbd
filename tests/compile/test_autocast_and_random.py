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


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    return torch.nn.functional.dropout(x, p, training=True) * 3


def test_dropout_draws_from_the_neuron_generator():
    x = torch.ones(1000, device="neuron")
    compiled = torch.compile(dropout, backend="neuron")
    torch.neuron.manual_seed(0)
    state = torch.neuron.get_rng_state()
    first, second = compiled(x, 0.5).cpu(), compiled(x, 0.5).cpu()
    assert not torch.equal(first, second)  # the core's generator advances per call
    torch.neuron.set_rng_state(state)
    torch.default_generator.manual_seed(123)  # the CPU generator plays no part
    assert torch.equal(compiled(x, 0.5).cpu(), first)
    torch.neuron.manual_seed(1)
    assert not torch.equal(compiled(x, 0.5).cpu(), first)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keeps_the_expected_fraction_scaled(p):
    n = 200_000
    torch.neuron.manual_seed(0)
    out = torch.compile(dropout, backend="neuron")(torch.ones(n, device="neuron"), p).cpu()
    kept = out != 0
    torch.testing.assert_close(out[kept], torch.full((int(kept.sum()),), 3 / (1 - p)))
    # Within 5 standard deviations of the binomial keep count.
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * ((p * (1 - p) / n) ** 0.5)


def test_dropout_in_a_training_graph_uses_one_mask_forward_and_backward():
    # A graph with random ops and a backward goes through Inductor's joint-graph passes (seed fusion).
    x = torch.ones(4096, device="neuron", requires_grad=True)
    torch.neuron.manual_seed(0)
    out = torch.compile(dropout, backend="neuron")(x, 0.5)
    out.sum().backward()
    kept = out.detach().cpu() != 0
    assert 0.4 < kept.float().mean().item() < 0.6
    # d(sum(dropout(x) * 3))/dx is the kept mask scaled by 3 / (1 - p): the forward's values.
    torch.testing.assert_close(x.grad.cpu(), kept.float() * 6.0)
    torch.testing.assert_close(out.detach().cpu(), kept.float() * 6.0)


def test_fallback_random_draws_eagers_numbers():
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand(64, device=x.device)

    x = torch.ones(64)
    torch.manual_seed(0)
    expected = noisy(x)  # the CPU, whose stream neuron's generator draws
    with torch._inductor.config.patch(fallback_random=True):
        torch.manual_seed(0)
        got = torch.compile(noisy, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
