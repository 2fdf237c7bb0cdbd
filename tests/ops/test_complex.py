"""Complex tensors on the device: held in device memory, their operators run on the host as
reported fallbacks (the chip has no complex arithmetic; float64 is treated alike), results
compared with the CPU. Models build rotary embeddings this way (Llama 4's ``torch.polar``)."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
from helpers import DEVICE, assert_same, check_twice

COMPLEX = [torch.complex64, torch.complex128]


def cplx(*shape: int, dtype: torch.dtype = torch.complex64, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_tensors_live_on_the_device_and_round_trip(dtype):
    x = cplx(3, 4, dtype=dtype)
    d = x.to(DEVICE)
    assert (d.device.type, d.dtype, d.shape, d.stride()) == (DEVICE, dtype, x.shape, x.stride())
    assert torch.equal(d.cpu(), x)
    zeros = torch.zeros(2, 3, dtype=dtype, device=DEVICE)
    assert zeros.device.type == DEVICE and torch.equal(zeros.cpu(), torch.zeros(2, 3, dtype=dtype))
    assert torch.equal(torch.ones(2, device=DEVICE).to(dtype).cpu(), torch.ones(2, dtype=dtype))


def test_complex_memory_is_device_memory():
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    d = torch.empty(1024, dtype=torch.complex64, device=DEVICE)
    assert torch.neuron.memory_allocated() - before == 1024 * 8
    del d
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_arithmetic_matches_the_cpu(dtype):
    a, b = cplx(4, 4, dtype=dtype), cplx(4, 4, dtype=dtype, seed=1)
    for fn in (torch.add, torch.mul, torch.div, torch.matmul):
        check_twice(fn, a, b)
    for fn in (torch.abs, torch.angle, torch.exp, torch.sum, torch.real, torch.imag):
        check_twice(fn, a)
    check_twice(lambda t: torch.fft.fft(t, dim=-1), a)


def test_lazy_conjugate_and_negative_views_are_honoured():
    x = cplx(5)
    d = x.to(DEVICE)
    assert d.conj().is_conj()
    assert torch.equal(d.conj().cpu(), x.conj())
    assert torch.equal(d.conj().resolve_conj().cpu(), x.conj())
    assert_same(x.conj() * x, d.conj() * d)
    assert torch.equal(torch._neg_view(d).cpu(), -x)
    y = torch.empty_like(d)
    y.copy_(d.conj())  # device to device, the bit resolved by the copy
    assert not y.is_conj() and torch.equal(y.cpu(), x.conj())


def test_view_as_real_and_view_as_complex_are_views_of_the_same_memory():
    x = cplx(3, 2)
    d = x.to(DEVICE)
    real = torch.view_as_real(d)
    expected = torch.view_as_real(x)
    assert (real.shape, real.stride(), real.dtype) == (expected.shape, expected.stride(), expected.dtype)
    assert real.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    real[0, 0, 1] = 7.0  # writes through to the complex tensor
    assert d[0, 0].cpu().imag.item() == 7.0
    pairs = torch.randn(4, 3, 2)
    on_device = pairs.to(DEVICE)
    back = torch.view_as_complex(on_device)
    assert torch.equal(back.cpu(), torch.view_as_complex(pairs))
    assert back.untyped_storage().data_ptr() == on_device.untyped_storage().data_ptr()


def rotary(x: torch.Tensor, positions: int) -> torch.Tensor:
    """Llama 4's rotary embedding: complex rotations from torch.polar."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000 ** (torch.arange(0, half, device=x.device).float() / half))
    angles = torch.outer(torch.arange(positions, device=x.device).float(), freqs)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    rotated = torch.view_as_complex(x.float().reshape(*x.shape[:-1], half, 2)) * freqs_cis
    return torch.view_as_real(rotated).flatten(-2).type_as(x)


def test_a_complex_rotary_embedding_and_its_gradient_match_the_cpu():
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(3), requires_grad=True)
    d = x.detach().to(DEVICE).requires_grad_(True)
    out, d_out = rotary(x, 6), rotary(d, 6)
    torch.testing.assert_close(d_out.cpu(), out)
    (out * out.detach()).sum().backward()
    (d_out * d_out.detach()).sum().backward()
    torch.testing.assert_close(d.grad.cpu(), x.grad)


def test_complex_operators_are_reported_fallbacks_and_strict_mode_refuses_them():
    d = cplx(4).to(DEVICE)
    torch_neuronx.clear_op_tracking()
    (d * d).cpu()
    assert "aten::mul.Tensor" in torch_neuronx.get_fallback_ops()
    torch_neuronx.set_strict_fallback(True)
    try:
        with pytest.raises(RuntimeError, match="complex tensors live on the device but compute on the host"):
            d + d
    finally:
        torch_neuronx.set_strict_fallback(False)
    assert_same(torch.ones(2) * 3, torch.ones(2, device=DEVICE) * 3)  # the device stays usable
