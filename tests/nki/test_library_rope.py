"""RoPE kernel (half-rotated as Hugging Face's rotate_half, and interleaved) against torch CPU."""
import pytest
import torch
from library_helpers import DTYPES, assert_close

import nki
from nki.kernels import rope


def _angles(seq, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    freqs = torch.outer(torch.arange(seq).float(), inv_freq)  # [S, D/2]
    return freqs.cos(), freqs.sin()


def _rotate_half(x):  # Hugging Face's
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference(x, cos, sin, interleaved):
    if interleaved:  # Meta Llama: pairs of neighbours as complex numbers
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(cos), torch.atan2(sin, cos))).flatten(-2)
    cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return x * cos2 + _rotate_half(x) * sin2


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,seq,dim", [(3, 128, 64), (2, 200, 32), (1, 5, 2)])
def test_rope_forward_and_backward(n, seq, dim, dtype, interleaved):
    x = torch.randn(n, seq, dim).to(dtype)
    cos, sin = _angles(seq, dim)
    out = rope(x, cos, sin, interleaved)
    xr = x.float().requires_grad_()
    ref = reference(xr, cos, sin, interleaved)
    assert out.dtype == dtype
    assert_close(out, ref.detach(), dtype)
    dy = torch.randn(n, seq, dim).to(dtype)
    ref.backward(dy.float())
    assert_close(rope(dy, cos, sin, interleaved, True), xr.grad, dtype)


def test_rope_cost_estimate():
    n, seq, dim = 4, 256, 64
    x = torch.randn(n, seq, dim)
    cos, sin = _angles(seq, dim)
    rope(x, cos, sin)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 0
    assert report.opcode_counts["VectorE.tensor_tensor[multiply]"] == 4 * n * (seq // 128)
    # x in and out once, cos and sin once per position tile
    assert report.dma_bytes == (2 * n * seq * dim + 2 * seq * dim // 2) * 4
