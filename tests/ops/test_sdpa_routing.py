"""scaled_dot_product_attention on neuron tensors runs the kernel library's attention kernels when
they handle the call (nki/kernels/sdpa_routing.py, registered with torch_neuronx/ops/attention_routing.py),
the fused host kernel otherwise; operator tracking shows which ran, and the switch turns the routing off."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from helpers import run_py
from nki.kernels import sdpa_routing
from torch_neuronx.ops import attention_routing

FLASH = {"nki_library::flash_attention_fwd", "nki_library::flash_attention_bwd"}
HOST = "aten::_scaled_dot_product_flash_attention_for_cpu"


@pytest.fixture(autouse=True)
def routing_on():
    attention_routing.set_nki_sdpa_enabled(True)
    yield
    attention_routing.set_nki_sdpa_enabled(True)


def qkv(dtype=torch.bfloat16, heads=(2, 1), seq_q=128, seq_k=128, d=32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, heads[0], seq_q, d, generator=g).to(dtype),
            *(torch.randn(1, heads[1], seq_k, d, generator=g).to(dtype) for _ in range(2)))


def sdpa_step(device, tensors, **kwargs):
    """Forward and backward of one SDPA call: (out, grads) on the CPU, and the operators tracked."""
    leaves = [t.to(device).requires_grad_() for t in tensors]
    torch.neuron.synchronize()
    torch_neuronx.clear_op_tracking()
    out = F.scaled_dot_product_attention(*leaves, **kwargs)
    out.float().square().sum().backward()
    torch.neuron.synchronize()
    return [t.cpu() for t in (out.detach(), *(leaf.grad for leaf in leaves))], torch_neuronx.get_executed_ops()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [dict(is_causal=True, enable_gqa=True), dict(scale=0.3)],
                         ids=["causal_gqa", "scaled_mha"])
def test_routed_forward_and_backward_match_the_cpu(dtype, kwargs):
    heads = (2, 1) if kwargs.get("enable_gqa") else (2, 2)
    tensors = qkv(dtype, heads, seq_q=200, seq_k=200)  # a ragged second tile
    got, ops = sdpa_step("neuron", tensors, **kwargs)
    want, _ = sdpa_step("cpu", tensors, **kwargs)
    assert FLASH <= set(ops) and "aten::scaled_dot_product_attention" in ops and HOST not in ops, ops
    assert torch_neuronx.get_fallback_ops() == {}
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.float(), w.float(), rtol=tol["rtol"], atol=tol["atol"] * w.abs().max().item())


def test_the_switch_keeps_the_host_kernel():
    tensors = qkv()
    attention_routing.set_nki_sdpa_enabled(False)
    got, ops = sdpa_step("neuron", tensors, is_causal=True, enable_gqa=True)
    want, _ = sdpa_step("cpu", tensors, is_causal=True, enable_gqa=True)
    assert HOST in ops and not FLASH & set(ops)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)  # the CPU's own kernel


def test_the_environment_variable_turns_routing_off():
    code = """
        import torch, torch_neuronx
        from torch_neuronx.ops import attention_routing
        q = torch.randn(1, 1, 128, 32, device="neuron")
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch.neuron.synchronize()
        print(attention_routing.nki_sdpa_enabled(), sorted(torch_neuronx.get_executed_ops()))
    """
    off = run_py(code, TORCH_NEURONX_NKI_SDPA="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.startswith("False") and HOST in off.stdout and "nki_library::" not in off.stdout
    on = run_py(code)
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith("True") and "nki_library::flash_attention_fwd" in on.stdout


@pytest.mark.filterwarnings("ignore:neuron. operator .* float64")  # float64 attention computes on the host
@pytest.mark.parametrize("case", ["mask", "dropout", "short", "causal_unequal_lengths", "head_dim", "float64"])
def test_calls_the_kernels_do_not_handle_keep_the_host_kernel(case):
    dtype = torch.float64 if case == "float64" else torch.float32
    q, k, v = qkv(dtype, (1, 1), seq_q=96 if case == "causal_unequal_lengths" else 128,
                  seq_k=64 if case == "short" else 128, d=160 if case == "head_dim" else 32)
    kwargs = {"mask": dict(attn_mask=torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device="neuron")),
              "dropout": dict(dropout_p=0.5), "causal_unequal_lengths": dict(is_causal=True)}.get(case, {})
    assert sdpa_routing.route(q, k, v, kwargs.get("attn_mask"), kwargs.get("dropout_p", 0.0),
                              kwargs.get("is_causal", False)) is None
    torch_neuronx.clear_op_tracking()
    F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), **kwargs)
    torch.neuron.synchronize()
    assert not any(op.startswith("nki_library::") for op in torch_neuronx.get_executed_ops())


def test_one_token_without_gradients_runs_the_decode_kernel():
    q, k, v = qkv(torch.bfloat16, (4, 2), seq_q=1, seq_k=256)
    torch_neuronx.clear_op_tracking()
    with torch.inference_mode():  # autograd keys skipped: the PrivateUse1 registration routes
        out = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), enable_gqa=True)
    torch.neuron.synchronize()
    assert "nki_library::decode_attention" in torch_neuronx.get_executed_ops()
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    torch.testing.assert_close(out.cpu().float(), want, rtol=2e-2, atol=2e-2)


def test_compiled_sdpa_has_the_kernels_as_graph_nodes():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def step(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).float().square().sum()

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    leaves = [t.to("neuron").requires_grad_() for t in qkv()]
    torch.compile(step, backend=aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward")))(
        *leaves).backward()
    assert "nki_library.flash_attention_fwd.default" in graphs["forward"]
    assert "nki_library.flash_attention_bwd.default" in graphs["backward"]
    torch._dynamo.reset()
    compiled = [t.to("neuron").requires_grad_() for t in qkv()]
    torch.compile(step, backend="neuron")(*compiled).backward()
    eager = [t.to("neuron").requires_grad_() for t in qkv()]
    step(*eager).backward()
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c.grad.cpu(), e.grad.cpu(), rtol=0, atol=0)
    torch._dynamo.reset()


def test_tiny_llama_training_step_runs_the_flash_kernels_and_matches_the_cpu():
    """A Hugging Face Llama (GQA: 4 query heads, 2 kv heads; head dim 16) over 128 tokens: its
    attention runs nki_library::flash_attention_fwd/bwd on neuron, loss and gradients match the CPU."""
    from torch_neuronx.testing.tiny_hf import VOCAB, tiny_llama
    tokens = torch.randint(0, VOCAB, (1, 128), generator=torch.Generator().manual_seed(0))

    def run(device):
        model = tiny_llama(attn_implementation="sdpa").to(device)
        loss = model(input_ids=tokens.to(device), labels=tokens.to(device)).loss
        loss.backward()
        return loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters()}

    torch_neuronx.clear_op_tracking()
    loss, grads = run("neuron")
    torch.neuron.synchronize()
    ops = torch_neuronx.get_executed_ops()
    assert all(ops.get(op, 0) >= 2 for op in FLASH), ops  # one call per layer at least
    assert HOST not in ops and torch_neuronx.get_fallback_ops() == {}
    cpu_loss, cpu_grads = run("cpu")
    torch.testing.assert_close(loss, cpu_loss, rtol=1e-5, atol=1e-5)
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.filterwarnings("ignore:neuron. operator .* nested tensors")  # nested tensors compute on the host
def test_nested_attention_keeps_the_composite_path_and_matches_the_cpu():
    def jagged(device):
        parts = [torch.randn(n, 2, 8, generator=torch.Generator().manual_seed(n)) for n in (3, 5)]
        return torch.nested.nested_tensor([p.to(device) for p in parts], layout=torch.jagged).transpose(1, 2)

    want = F.scaled_dot_product_attention(*(jagged("cpu") for _ in range(3)))
    got = F.scaled_dot_product_attention(*(jagged("neuron") for _ in range(3)))
    assert got.is_nested and got.device.type == "neuron"
    for g, w in zip(got.transpose(1, 2).unbind(), want.transpose(1, 2).unbind()):
        torch.testing.assert_close(g.cpu(), w)


def test_a_registered_router_gets_the_calls_in_its_key_range_and_may_decline():
    seen = []

    def declining(query, key, value, *args, **kwargs):
        seen.append(key.shape[2])
        return None

    q = torch.randn(1, 1, 16, 32)
    try:
        attention_routing.register_router(declining, 16, 64)
        torch_neuronx.clear_op_tracking()
        for keys in (8, 16, 128):
            kv = torch.randn(1, 1, keys, 32)
            out = F.scaled_dot_product_attention(q.to("neuron"), kv.to("neuron"), kv.to("neuron"))
            torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, kv, kv), rtol=0, atol=0)
    finally:
        sdpa_routing.register()
    assert seen == [16]  # the shim sends only the calls in the router's key range
    assert HOST in torch_neuronx.get_executed_ops()  # declined: the composite path
