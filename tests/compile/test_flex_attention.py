"""FlexAttention compiled on neuron (dense lowering), forward and backward, against the CPU."""
import math

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_neuronx  # noqa: F401

B, H, S, D, WINDOW = 1, 2, 128, 16, 24


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def causal_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= WINDOW)


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx).float() * 0.05 + h


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod: bool) -> torch.Tensor:
    """The same attention written with dense CPU ops (CPU FlexAttention has no backward)."""
    i = torch.arange(S)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    if score_mod:
        scores = scores + (i[:, None] - i[None, :]).float() * 0.05 + torch.arange(H).view(1, H, 1, 1)
    keep = causal_window(0, 0, i[:, None], i[None, :])
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("score_mod", [True, False], ids=["score_mod_and_mask_mod", "mask_mod_only"])
def test_flex_attention_forward_and_backward_match_cpu(score_mod):
    torch.manual_seed(0)
    qkv = [torch.randn(B, H, S, D) for _ in range(3)]
    cpu = [t.clone().requires_grad_() for t in qkv]
    dev = [t.to("neuron").requires_grad_() for t in qkv]
    ref = reference(*cpu, score_mod)
    block_mask = create_block_mask(causal_window, B, H, S, S, device="neuron")
    out = torch.compile(flex_attention, backend="neuron")(
        *dev, score_mod=relative_bias if score_mod else None, block_mask=block_mask)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(ref)
    ref.backward(grad)
    out.backward(grad.to("neuron"))
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)


def test_compiled_create_block_mask_takes_no_tensor_and_matches_cpu():
    # The graph takes no tensor (it creates them on the device it is given): the executable runs
    # on the graph's device, call after call.
    compiled = torch.compile(create_block_mask, backend="neuron")
    ref = create_block_mask(causal_window, B, H, S, S, device="cpu")
    for _ in range(2):
        mask = compiled(causal_window, B, H, S, S, device="neuron")
        assert mask.kv_indices.device.type == "neuron"
        for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
            torch.testing.assert_close(getattr(mask, name).cpu(), getattr(ref, name), rtol=0, atol=0)
