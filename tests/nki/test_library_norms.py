"""RMSNorm and LayerNorm kernels (forward, backward, residual add) against torch CPU autograd."""
import pytest
import torch
from library_helpers import DTYPES, assert_close, dtype_tolerance

import nki
from nki.kernels import layernorm_bwd, layernorm_fwd, rmsnorm_bwd, rmsnorm_fwd

SHAPES = [(128, 64), (200, 256), (5, 96), (130, 1)]


def _inputs(shape, dtype, residual):
    gen = torch.Generator().manual_seed(sum(shape))
    x, res, dy = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))
    w, b = (torch.randn(shape[1], generator=gen).to(dtype) for _ in range(2))
    return x, (res if residual else None), w, b, dy


def _rms_ref(h, w, eps):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


def _fp32_leaves(*tensors):
    return [None if t is None else t.float().requires_grad_() for t in tensors]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rmsnorm_forward_backward(shape, dtype, residual):
    x, res, w, _, dy = _inputs(shape, dtype, residual)
    eps = 1e-5
    fwd = rmsnorm_fwd(x, w, res, eps)
    out, rstd = fwd[0], fwd[-1]
    xr, rr, wr = _fp32_leaves(x, res, w)
    h_ref = xr if rr is None else xr + rr
    if rr is not None:  # the sum is rounded to the input dtype, as the unfused add would be
        assert_close(fwd[1], h_ref.detach(), dtype)
        h_ref = h_ref.to(dtype).float()
    ref = _rms_ref(h_ref, wr, eps)
    assert_close(out, ref.detach(), dtype)
    expected_rstd = torch.rsqrt(h_ref.detach().pow(2).mean(-1) + eps)
    torch.testing.assert_close(rstd, expected_rstd, **dtype_tolerance(torch.float32))

    dres = torch.randn(shape, dtype=dtype) if residual else None
    h = x if res is None else fwd[1]
    dh, dw = rmsnorm_bwd(dy, h, w, rstd, dres)
    outputs, grads = [ref], [dy.float()]
    if residual:
        outputs.append(xr + rr)
        grads.append(dres.float())
    torch.autograd.backward(outputs, grads)
    assert dh.dtype == dtype and dw.dtype == torch.float32
    assert_close(dh, xr.grad, dtype, scale=shape[1] ** 0.5)
    if residual:
        assert_close(dh, rr.grad, dtype, scale=shape[1] ** 0.5)
    assert_close(dw, wr.grad, dtype, scale=shape[0] ** 0.5)


@pytest.mark.parametrize("residual,bias", [(False, True), (True, True), (False, False)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES[:3])
def test_layernorm_forward_backward(shape, dtype, residual, bias):
    x, res, w, b, dy = _inputs(shape, dtype, residual)
    b = b if bias else None
    eps = 1e-5
    fwd = layernorm_fwd(x, w, b, res, eps)
    out, mean, rstd = fwd[0], fwd[-2], fwd[-1]
    xr, rr, wr, br = _fp32_leaves(x, res, w, b)
    h_ref = xr if rr is None else (xr + rr)
    if rr is not None:
        h_ref = h_ref.to(dtype).float()
    ref = torch.nn.functional.layer_norm(h_ref, (shape[1],), wr, br, eps)
    assert_close(out, ref.detach(), dtype)
    torch.testing.assert_close(mean, h_ref.detach().mean(-1), **dtype_tolerance(torch.float32))

    dres = torch.randn(shape, dtype=dtype) if residual else None
    h = x if res is None else fwd[1]
    dh, dw, db = layernorm_bwd(dy, h, w, mean, rstd, dres)
    outputs, grads = [ref], [dy.float()]
    if residual:
        outputs.append(xr + rr)
        grads.append(dres.float())
    torch.autograd.backward(outputs, grads)
    assert_close(dh, xr.grad, dtype, scale=shape[1] ** 0.5)
    assert_close(dw, wr.grad, dtype, scale=shape[0] ** 0.5)
    assert_close(db, dy.float().sum(0), dtype, scale=shape[0] ** 0.5)


def test_norm_cost_estimates_are_sane():
    R, D = 256, 128
    x, _, w, b, dy = _inputs((R, D), torch.float32, False)
    _, mean, rstd = layernorm_fwd(x, w, b, None)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 0 and report.engine_instructions["TensorE"] == 0
    assert report.dma_bytes == (2 * R * D + 2 * D + 2 * R) * 4  # x, out, weight, bias, mean, rstd
    layernorm_bwd(dy, x, w, mean, rstd)
    report = nki.simulator.last_report()
    # dweight and dbias: one ones-column matmul per row tile each (2 * R * D flops apiece)
    assert report.tensor_flops == 2 * (2 * R * 1 * D)
    assert report.opcode_counts["TensorE.matmul"] == 2 * (R // 128)
    assert report.engine_busy_seconds["VectorE"] > report.engine_busy_seconds["TensorE"]
