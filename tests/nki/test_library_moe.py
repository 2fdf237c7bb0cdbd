"""MoE kernels (router top-k, blockwise expert matmul) against torch CPU."""
import pytest
import torch
from library_helpers import DTYPES, assert_close

import nki
from nki.kernels import blockwise_expert_matmul, router_topk


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,experts,k", [(200, 8, 2), (128, 64, 8), (5, 4, 1)])
def test_router_topk(tokens, experts, k, dtype, normalize):
    logits = torch.randn(tokens, experts).to(dtype)
    weights, chosen = router_topk(logits, k, normalize)
    probs = torch.softmax(logits.float(), -1)
    expected = torch.topk(probs, k, -1)
    if normalize:
        expected_weights = expected.values / expected.values.sum(-1, keepdim=True)
    else:
        expected_weights = expected.values
    assert weights.dtype == torch.float32 and chosen.dtype == torch.int32
    assert_close(weights, expected_weights, torch.float32)
    # ties (bf16 logits) may choose other experts: each chosen expert has the expected probability
    assert_close(torch.gather(probs, 1, chosen.long()), expected.values, torch.float32)


def _group_by_expert(expert_of_token, experts, block=128):
    """Token order grouped by expert, each group padded to whole blocks (padding rows: -1)."""
    order, block_expert = [], []
    for e in range(experts):
        tokens = (expert_of_token == e).nonzero().flatten().tolist()
        blocks = -(-len(tokens) // block)
        order += tokens + [-1] * (blocks * block - len(tokens))
        block_expert += [e] * blocks
    return torch.tensor(order), block_expert


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,hidden,out,experts", [(300, 64, 96, 3), (100, 160, 600, 4)])
def test_blockwise_expert_matmul(tokens, hidden, out, experts, dtype):
    x = torch.randn(tokens, hidden).to(dtype)
    w = (torch.randn(experts, hidden, out) / hidden ** 0.5).to(dtype)
    expert_of_token = torch.randint(0, experts, (tokens,))
    order, block_expert = _group_by_expert(expert_of_token, experts)
    grouped = torch.where((order >= 0)[:, None], x[order.clamp(min=0)], 0)
    result = blockwise_expert_matmul(grouped, w, block_expert)
    real = order >= 0
    expected = torch.einsum("th,thn->tn", x.float(), w.float()[expert_of_token])
    assert result.dtype == dtype
    assert_close(result[real], expected[order[real]], dtype, scale=hidden ** 0.5)
    assert (result[~real] == 0).all()
    report = nki.simulator.last_report()
    assert report.tensor_flops == 2 * len(block_expert) * 128 * hidden * out


def test_router_cost_estimate():
    tokens, experts, k = 256, 16, 2
    router_topk(torch.randn(tokens, experts), k)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 0
    assert report.opcode_counts["ScalarE.activation[exp]"] == tokens // 128
    assert report.dma_bytes == tokens * (experts + 2 * k) * 4
