"""torch_neuronx.get_dynamo_metrics() / reset_dynamo_metrics()."""
import pytest
import torch

import torch_neuronx


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch_neuronx.reset_dynamo_metrics()
    yield
    torch._dynamo.reset()


def with_graph_break(x: torch.Tensor) -> torch.Tensor:
    y = x.cos() + 1
    torch._dynamo.graph_break()
    return y * x.sin()


def test_metrics_count_graphs_graph_breaks_and_stage_times():
    x = torch.randn(32)
    out = torch.compile(with_graph_break, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), with_graph_break(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["graphs"] == 2 and metrics["graph_breaks"] == 1
    assert metrics["executables_compiled"] + metrics["cache_hits"] == 2
    assert metrics["recompilations"] == 0 and metrics["eager_fallbacks"] == 0
    assert {"aot_autograd", "cache_load"} <= metrics["compile_time_s"].keys()
    assert all(seconds >= 0 for seconds in metrics["compile_time_s"].values())


def test_reset_zeroes_the_metrics():
    torch.compile(with_graph_break, backend="neuron")(torch.randn(4, device="neuron"))
    torch_neuronx.reset_dynamo_metrics()
    metrics = torch_neuronx.get_dynamo_metrics()
    assert metrics["compile_time_s"] == {}
    assert all(v == 0 for k, v in metrics.items() if k != "compile_time_s")
