"""The transformer inference fast path on neuron against the CPU, with nothing falling back.

In eval mode without gradients, nn.TransformerEncoderLayer and nn.MultiheadAttention call fused
operators on a PrivateUse1 device as on CUDA (`_transformer_encoder_layer_fwd`,
`_native_multi_head_attention`, `_masked_softmax`, ...); the lowering table runs them natively.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torch_neuronx
from helpers import assert_same, to_device

TOL = dict(atol=1e-5, rtol=1e-5)
PADDING = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])


def _pair(make):
    torch.manual_seed(0)
    cpu = make().eval()
    dev = make().eval().to("neuron")
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal"])
def test_transformer_encoder_eval(norm_first, masks):
    # enable_nested_tensor=False keeps the padding mask on these fused kernels; the default
    # builds a nested tensor, whose layers run on the host (tests/ops/test_nested_tensors.py).
    cpu, dev = _pair(lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first), 2,
        enable_nested_tensor=False))
    x = torch.randn(2, 5, 16)
    kwargs = {"none": {}, "padding": {"src_key_padding_mask": PADDING},
              "causal": {"mask": nn.Transformer.generate_square_subsequent_mask(5), "is_causal": True}}[masks]
    with torch.no_grad():
        assert_same(cpu(x, **kwargs), dev(to_device(x), **to_device(kwargs)), **TOL)
    assert torch_neuronx.get_executed_ops().get("aten::_transformer_encoder_layer_fwd", 0) >= 1
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_eval(need_weights):
    cpu, dev = _pair(lambda: nn.MultiheadAttention(16, 4, batch_first=True))
    x = torch.randn(2, 5, 16)
    xd = to_device(x)
    with torch.no_grad():  # the fast path is self-attention: query, key and value are one tensor
        out = cpu(x, x, x, key_padding_mask=PADDING, need_weights=need_weights)
        out_d = dev(xd, xd, xd, key_padding_mask=to_device(PADDING), need_weights=need_weights)
    assert_same(out, out_d, **TOL)
    assert torch_neuronx.get_executed_ops().get("aten::_native_multi_head_attention", 0) >= 1
    assert torch_neuronx.get_fallback_ops() == {}


def test_masked_softmax_and_add_relu():
    x, y = torch.randn(3, 4, 6), torch.randn(3, 4, 6)
    mask = torch.rand(3, 4, 6) > 0.7
    xd, yd, maskd = to_device((x, y, mask))
    assert_same(torch._masked_softmax(x, mask, 2, None), torch._masked_softmax(xd, maskd, 2, None))
    assert_same(torch._VF._add_relu(x, y), torch._VF._add_relu(xd, yd))
    assert torch_neuronx.get_fallback_ops() == {}
