"""The validation kernels against torch references."""
import ml_dtypes
import numpy as np
import pytest
import torch

import nki
from nki.kernels import flash_attention_fwd, matmul, rmsnorm, softmax

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(1)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def t(x):
    return torch.from_numpy(np.asarray(x, np.float32))


@pytest.mark.parametrize("shape", [(128, 128, 512), (256, 384, 1024), (200, 300, 700), (1, 5, 3),
                                   (130, 129, 513)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_matmul(shape, dtype):
    M, K, N = shape
    a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
    out = nki.simulate(matmul)(a, b)
    assert out.dtype == np.dtype(dtype) and out.shape == (M, N)
    ref = t(a) @ t(b)
    if dtype == BF16:  # fp32 accumulation, one bf16 rounding of the result
        torch.testing.assert_close(t(out), ref.bfloat16().float(), rtol=1.6e-2, atol=1e-2)
    else:
        torch.testing.assert_close(t(out), ref, rtol=1e-5, atol=1e-4)
    report = nki.simulator.last_report()
    assert report.tensor_flops >= 2 * M * N * K


def test_matmul_torch_bf16_tensors():
    a = torch.randn(192, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 160, dtype=torch.bfloat16)
    out = matmul(a, b)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), (a.float() @ b.float()).bfloat16().float(),
                               rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("shape", [(128, 512), (300, 1000), (7, 33)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_softmax(shape, dtype):
    x = randn(*shape, dtype=dtype) * 3
    out = nki.simulate(softmax)(x)
    ref = torch.softmax(t(x), dim=1)
    if dtype == BF16:
        torch.testing.assert_close(t(out), ref.bfloat16().float(), rtol=1e-2, atol=1e-3)
    else:
        torch.testing.assert_close(t(out), ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(128, 256), (300, 1000), (5, 64)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_rmsnorm(shape, dtype):
    x, w = randn(*shape, dtype=dtype), randn(shape[1], dtype=dtype)
    out = nki.simulate(rmsnorm)(x, w, 1e-5)
    ref = torch.nn.functional.rms_norm(t(x), (shape[1],), t(w), 1e-5)
    if dtype == BF16:
        torch.testing.assert_close(t(out), ref.bfloat16().float(), rtol=1.6e-2, atol=1e-2)
    else:
        torch.testing.assert_close(t(out), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seq,d", [(128, 64), (384, 128), (512, 32)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_flash_attention_causal(seq, d, dtype):
    q, k, v = (randn(seq, d, dtype=dtype) for _ in range(3))
    scale = 0.3
    out = nki.simulate(flash_attention_fwd)(q, k, v, scale)
    ref = torch.nn.functional.scaled_dot_product_attention(
        t(q)[None], t(k)[None], t(v)[None], is_causal=True, scale=scale)[0]
    if dtype == BF16:
        torch.testing.assert_close(t(out), ref, rtol=3e-2, atol=3e-2)
    else:
        torch.testing.assert_close(t(out), ref, rtol=1e-5, atol=1e-5)
    report = nki.simulator.last_report()
    tiles = seq // 128
    assert report.opcode_counts["TensorE.matmul"] == tiles * (tiles + 1)  # causal: half the tiles


def test_flash_attention_default_scale():
    q, k, v = (randn(256, 64) for _ in range(3))
    out = nki.simulate(flash_attention_fwd, fp32_compute=True)(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(t(q)[None], t(k)[None], t(v)[None],
                                                           is_causal=True)[0]
    torch.testing.assert_close(t(out), ref, rtol=1e-5, atol=1e-5)
