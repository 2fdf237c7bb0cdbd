"""torch.compile(backend="neuron") against CPU eager: inference, training, the README's training loop."""
import pytest
import torch
from torch import nn

import torch_neuronx
from torch_neuronx.testing.parity import compare_losses, max_rel_diff_state, train
from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


def test_inference_and_gradients_match_cpu_eager():
    cpu, dev = mlp(), mlp().to("neuron")
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(8, 16)
    for _ in range(3):  # the first call compiles; later calls reuse the executable
        out = compiled(x.to("neuron"))
    assert out.device.type == "neuron"
    ref = cpu(x)
    torch.testing.assert_close(out.cpu(), ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)


def test_attention_with_a_mask_compiles_and_matches_cpu_eager():
    """The kernel choice of scaled_dot_product_attention is asked of the CPU's dispatch stub with
    metadata-only CPU tensors; under Dynamo's fake tensors that question must not reach the fake
    mode (it refused them: a KV-cache decoding step with a boolean mask failed to compile)."""
    def attend(q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g) for n in (1, 27, 27))
    mask = torch.rand(1, 1, 1, 27, generator=g) > 0.3
    out = torch.compile(attend, backend="neuron")(*(t.to("neuron") for t in (q, k, v, mask)))
    torch.testing.assert_close(out.cpu(), attend(q, k, v, mask))


def test_a_tensor_made_in_forward_is_a_constant_of_the_executable():
    """torch.tensor([...], device=x.device) in a forward becomes a real device tensor in the graph:
    the cache key reads its bytes inside the fake mode, and the host trace needs it on the CPU
    (both failed: CPM-Ant in the model sweep)."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            return self.lin(x) * torch.tensor([float(i) for i in range(16)], device=x.device)

    cpu, dev = Scaled(), Scaled().to("neuron")
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    out = torch.compile(dev, backend="neuron")(x.to("neuron"))
    ref = cpu(x)
    torch.testing.assert_close(out.cpu(), ref)
    out.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(dev.lin.weight.grad.cpu(), cpu.lin.weight.grad)


def test_compiled_graph_runs_as_one_kernel_without_host_copies():
    dev = mlp().to("neuron")
    compiled = torch.compile(dev, backend="neuron")
    x = torch.randn(8, 16, device="neuron")
    with torch.no_grad():
        compiled(x)
        torch_neuronx.clear_op_tracking()
        compiled(x)
        torch.neuron.synchronize()
    executed, fallbacks = torch_neuronx.get_executed_ops(), torch_neuronx.get_fallback_ops()
    assert fallbacks == {}
    assert "aten::addmm" not in executed and "aten::native_layer_norm" not in executed


def test_compiled_optimizer_step_matches_cpu_eager_as_one_kernel():
    """torch.compile(optimizer.step): parameters and state are updated in place by the compiled
    kernel (AOTAutograd keeps the input mutations in the graph), without eager foreach ops."""
    cpu, dev = mlp(), mlp().to("neuron")
    cpu_opt, dev_opt = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (cpu, dev))
    dev_step = torch.compile(dev_opt.step, backend="neuron")
    x = torch.randn(8, 16)
    for i in range(4):
        for model, opt, step, inp in ((cpu, cpu_opt, cpu_opt.step, x), (dev, dev_opt, dev_step, x.to("neuron"))):
            opt.zero_grad()
            model(inp).square().sum().backward()
            if model is dev and i == 3:
                torch.neuron.synchronize()
                torch_neuronx.clear_op_tracking()
            step()
    torch.neuron.synchronize()
    eager = [op for op in torch_neuronx.get_executed_ops() if op.startswith("aten::")]
    assert eager == []
    # The fused update rounds differently from eager's separate foreach ops (lerp, addcmul).
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.cpu(), p)
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(dev_opt.state[q][key].cpu(), cpu_opt.state[p][key], rtol=1e-4, atol=1e-5)


def compiled_gpt() -> nn.Module:
    model = TinyGPT(GPTConfig())
    model.compile()  # no backend argument: the default backend
    return model


def test_spec_compiled_training_loop_matches_cpu_eager():
    batches = make_batches(4, 8, 64, 256, seed=0)
    cpu_losses, cpu_state = train(lambda: TinyGPT(GPTConfig()), batches, "cpu", steps=50)
    torch.compiler.set_default_backend("neuron")
    try:
        dev_losses, dev_state = train(compiled_gpt, batches, "neuron", steps=50)
    finally:
        torch.compiler.set_default_backend("inductor")
    assert cpu_losses[-1] < cpu_losses[0] - 0.5
    assert compare_losses(dev_losses, cpu_losses) <= 1e-5
    # Fused kernels round differently from eager; Adam's normalization turns that into small
    # weight differences for parameters whose gradients are near zero.
    assert max_rel_diff_state(dev_state, cpu_state) <= 5e-3


def test_dynamic_shapes_are_refused_with_a_clear_error():
    compiled = torch.compile(mlp().to("neuron"), backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="static shapes"):
        compiled(torch.randn(8, 16, device="neuron"))
    torch.testing.assert_close((torch.ones(2, device="neuron") * 3).cpu(), torch.full((2,), 3.0))


def test_cpu_compilation_in_the_same_process_is_unaffected():
    dev = torch.compile(mlp().to("neuron"), backend="neuron")
    dev(torch.randn(4, 16, device="neuron"))
    cpu_model = mlp()
    x = torch.randn(4, 16)
    torch.testing.assert_close(torch.compile(cpu_model)(x), cpu_model(x))


def test_new_shapes_compile_static_executables_while_cpu_inductor_goes_dynamic():
    from torch._dynamo.utils import counters
    torch_neuronx.reset_dynamo_metrics()
    cpu, dev = mlp(), torch.compile(mlp().to("neuron"), backend="neuron")
    for rows in (4, 6, 9):
        x = torch.randn(rows, 16)
        torch.testing.assert_close(dev(x.to("neuron")).cpu(), cpu(x))
    metrics = torch_neuronx.get_dynamo_metrics()
    # Per shape a forward and a backward (compiled with the forward for the cache) executable.
    assert metrics["recompilations"] == 2 and metrics["executables_compiled"] + metrics["cache_hits"] == 6

    frames_before = counters["frames"]["ok"]
    cpu_compiled = torch.compile(lambda x: x.sin() * 2)
    for rows in (4, 6, 9):
        cpu_compiled(torch.randn(rows))
    # Inductor's default: static, then one dynamic graph for every later size.
    assert counters["frames"]["ok"] - frames_before == 2


def test_mode_is_accepted_with_a_warning():
    compiled = torch.compile(mlp().to("neuron"), backend="neuron", mode="max-autotune")
    with pytest.warns(UserWarning, match="mode='max-autotune' has no effect"):
        compiled(torch.randn(2, 16, device="neuron"))


def nonzero_count(x: torch.Tensor) -> torch.Tensor:
    return x.nonzero().float().sum() + x.sum()


@pytest.fixture
def data_dependent_shapes():
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        yield


def test_a_failing_stage_raises_naming_the_stage_and_the_node(data_dependent_shapes):
    with pytest.raises(Exception, match=r"(?s)stage 'lowering' failed.*node 'nonzero'.*"
                                        r"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0"):
        torch.compile(nonzero_count, backend="neuron")(torch.randn(8, device="neuron"))
    torch.testing.assert_close((torch.ones(2, device="neuron") * 3).cpu(), torch.full((2,), 3.0))


@pytest.mark.parametrize("switch", ["env", "option"])
def test_the_fallback_switch_runs_a_failing_graph_eagerly(data_dependent_shapes, monkeypatch, switch):
    options = None
    if switch == "env":
        monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    else:
        options = {"fallback_execution": True}
    torch_neuronx.reset_dynamo_metrics()
    x = torch.tensor([0.0, 1.5, 0.0, -2.0])
    compiled = torch.compile(nonzero_count, backend="neuron", options=options)
    with pytest.warns(UserWarning, match="runs eagerly"):
        out = compiled(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), nonzero_count(x))
    assert torch_neuronx.get_dynamo_metrics()["eager_fallbacks"] == 1


class NonzeroScaledGrad(torch.autograd.Function):
    """A static forward whose backward has a data-dependent size, which the lowering refuses."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * (grad > 0).nonzero().float().sum()  # only the backward can compute it


def scaled_sum(x: torch.Tensor) -> torch.Tensor:
    return NonzeroScaledGrad.apply(x).sin().sum()


def test_a_failing_backward_compile_makes_the_whole_graph_run_eagerly(data_dependent_shapes):
    torch_neuronx.reset_dynamo_metrics()
    x = torch.tensor([0.0, 1.5, 0.0, -2.0], requires_grad=True)
    x_dev = x.detach().to("neuron").requires_grad_()
    compiled = torch.compile(scaled_sum, backend="neuron", options={"fallback_execution": True})
    with pytest.warns(UserWarning, match=r"(?s)runs eagerly.*stage 'lowering' failed for the backward graph"):
        out = compiled(x_dev)
    out.backward()
    scaled_sum(x).backward()
    torch.testing.assert_close(out.detach().cpu(), scaled_sum(x).detach())
    torch.testing.assert_close(x_dev.grad.cpu(), x.grad)
    assert torch_neuronx.get_dynamo_metrics()["eager_fallbacks"] == 1


@pytest.fixture
def recompile_limit_2():
    with torch._dynamo.config.patch(recompile_limit=2):
        yield


def test_shapes_over_the_recompile_limit_run_eagerly_with_a_warning(recompile_limit_2):
    torch_neuronx.reset_dynamo_metrics()
    cpu, dev = mlp(), torch.compile(mlp().to("neuron"), backend="neuron")
    for rows in (4, 6, 9, 11):  # 4: static; 6 and 9: per-shape executables; 11: over the limit
        x = torch.randn(rows, 16)
        if rows == 11:
            with pytest.warns(UserWarning, match=r"graph \d+ has been compiled for 2 input shapes "
                                                 r"\(torch._dynamo.config.recompile_limit\).*pad inputs"):
                out = dev(x.to("neuron"))
        else:
            out = dev(x.to("neuron"))
        torch.testing.assert_close(out.cpu(), cpu(x))
    assert torch_neuronx.get_dynamo_metrics()["recompilations"] == 2


@torch._dynamo.config.patch(fail_on_recompile_limit_hit=True)
def test_fail_on_recompile_limit_hit_raises_over_the_limit(recompile_limit_2):
    dev = torch.compile(mlp().to("neuron"), backend="neuron")
    for rows in (4, 6, 9):
        dev(torch.randn(rows, 16, device="neuron"))
    with pytest.raises(RuntimeError, match="recompile_limit"):
        dev(torch.randn(11, 16, device="neuron"))
