"""SwiGLU MLP and fused linear + cross-entropy kernels against torch CPU autograd."""
import pytest
import torch
import torch.nn.functional as F
from library_helpers import DTYPES, assert_close

import nki
from nki.kernels import linear_cross_entropy_bwd, linear_cross_entropy_fwd, swiglu_bwd, swiglu_fwd


def _leaves(*tensors):
    return [t.float().requires_grad_() for t in tensors]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,hidden,inter", [(128, 64, 128), (200, 160, 600), (3, 32, 48)])
def test_swiglu_forward_backward(tokens, hidden, inter, dtype):
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    wg, wu = ((torch.randn(hidden, inter, generator=gen) / hidden ** 0.5).to(dtype) for _ in range(2))
    wd = (torch.randn(inter, hidden, generator=gen) / inter ** 0.5).to(dtype)
    dy = torch.randn(tokens, hidden, generator=gen).to(dtype)
    out = swiglu_fwd(x, wg, wu, wd)
    xr, wgr, wur, wdr = _leaves(x, wg, wu, wd)
    ref = (F.silu(xr @ wgr) * (xr @ wur)) @ wdr
    assert out.dtype == dtype
    scale = inter ** 0.5
    assert_close(out, ref.detach(), dtype, scale)
    ref.backward(dy.float())
    dx, dwg, dwu, dwd = swiglu_bwd(dy, x, wg, wu, wd)
    assert dx.dtype == dtype and dwg.dtype == torch.float32
    assert_close(dx, xr.grad, dtype, scale)
    for got, expected in ((dwg, wgr.grad), (dwu, wur.grad), (dwd, wdr.grad)):
        assert_close(got, expected, dtype, scale * tokens ** 0.5)


def test_swiglu_cost_estimate_counts_the_matmul_flops():
    T, H, F_ = 256, 128, 256
    x, wg, wu = torch.randn(T, H), torch.randn(H, F_), torch.randn(H, F_)
    wd, dy = torch.randn(F_, H), torch.randn(T, H)
    swiglu_fwd(x, wg, wu, wd)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 3 * 2 * T * H * F_  # gate, up, down (transposes count no flops)
    assert report.engine_busy_seconds["TensorE"] > 0 and report.instruction_count < 200
    swiglu_bwd(dy, x, wg, wu, wd)
    # gate, up and the gradient at a; three weight gradients; dx through gate and up
    assert nki.simulator.last_report().tensor_flops == 8 * 2 * T * H * F_


def _ce_inputs(tokens, hidden, vocab, dtype, ignored):
    gen = torch.Generator().manual_seed(vocab)
    h = torch.randn(tokens, hidden, generator=gen).to(dtype)
    w = (torch.randn(vocab, hidden, generator=gen) / hidden ** 0.5 * 3).to(dtype)
    labels = torch.randint(0, vocab, (tokens,), generator=gen, dtype=torch.int32)
    labels[::ignored] = -100
    return h, w, labels


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,hidden,vocab", [(128, 64, 512), (200, 160, 1000), (5, 32, 7)])
def test_linear_cross_entropy_forward_backward(tokens, hidden, vocab, dtype):
    h, w, labels = _ce_inputs(tokens, hidden, vocab, dtype, ignored=3)
    loss, lse = linear_cross_entropy_fwd(h, w, labels)
    hr, wr = _leaves(h, w)
    logits = hr @ wr.T
    ref = F.cross_entropy(logits, labels.long(), ignore_index=-100, reduction="none")
    assert loss.dtype == lse.dtype == torch.float32
    assert (loss[labels == -100] == 0).all()
    assert_close(loss, ref.detach(), torch.float32, hidden ** 0.5)
    assert_close(lse, logits.detach().logsumexp(-1), torch.float32, hidden ** 0.5)
    dloss = torch.rand(tokens, generator=torch.Generator().manual_seed(tokens))
    ref.backward(dloss)
    dh, dw = linear_cross_entropy_bwd(dloss, h, w, labels, lse)
    assert dh.dtype == dtype and dw.dtype == torch.float32
    assert_close(dh, hr.grad, dtype, hidden ** 0.5)
    assert_close(dw, wr.grad, dtype, tokens ** 0.5)


def test_ignore_index_other_than_the_default():
    h, w, labels = _ce_inputs(130, 64, 512, torch.float32, ignored=2)
    labels[labels == -100] = 7
    loss, _ = linear_cross_entropy_fwd(h, w, labels, 7)
    ref = F.cross_entropy(h @ w.T, labels.long(), ignore_index=7, reduction="none")
    assert (loss[labels == 7] == 0).all()
    assert_close(loss, ref, torch.float32, 8)


def test_cross_entropy_cost_estimate_and_chunking():
    T, H, V = 256, 128, 1024
    h, w, labels = _ce_inputs(T, H, V, torch.float32, ignored=5)
    loss, lse = linear_cross_entropy_fwd(h, w, labels)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 2 * T * H * V
    # logits live only as one [128, 512] PSUM chunk at a time; HBM traffic has no [T, V] term
    assert report.peak_psum_banks <= 3
    assert report.dma_bytes < (T * H + 3 * V * H) * 4 * 2
    linear_cross_entropy_bwd(torch.ones(T), h, w, labels, lse)
    assert nki.simulator.last_report().tensor_flops == 3 * 2 * T * H * V
