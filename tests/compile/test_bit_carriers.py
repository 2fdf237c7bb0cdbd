"""E8M0 scales and packed FP4 move through compiled graphs as bytes (compile/bit_carriers.py):
Inductor's C++ code generator has no type for them, yet a compiled MX recipe creates, pads and
swizzles them before its matmul. The compiled results equal eager's bit for bit (the same bytes)."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
from torch_neuronx.compile.bit_carriers import CARRIED, bytes_as


def pad_and_swizzle(bits: torch.Tensor, saved: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """What to_mx and the blocked-scale layout do to scales: bits viewed as the dtype, written
    into a padded buffer, permuted and made contiguous; a graph input of the dtype moved too."""
    scales = bits.view(dtype)
    if dtype == torch.float8_e8m0fnu:  # a fill of the dtype, as to_mx pads (FP4 has no fill kernel)
        padded = torch.full((8, 4), 0, dtype=dtype, device=bits.device)
    else:
        padded = torch.full((8, 4), 7, dtype=torch.uint8, device=bits.device).view(dtype)
    padded[:4, :2] = scales
    swizzled = padded.view(2, 4, 4).permute(1, 0, 2).contiguous()
    return swizzled, torch.cat([saved.t().contiguous(), saved.t()], dim=0)


@pytest.mark.parametrize("dtype", CARRIED, ids=str)
def test_scales_created_and_moved_in_a_compiled_graph_equal_eager(device, dtype):
    g = torch.Generator().manual_seed(0)
    bits, saved = torch.randint(0, 255, (4, 2), dtype=torch.uint8, generator=g), \
        torch.randint(0, 255, (3, 5), dtype=torch.uint8, generator=g).view(dtype)
    expected = pad_and_swizzle(bits, saved, dtype)
    compiled = torch.compile(pad_and_swizzle, backend="neuron", fullgraph=True)
    torch_neuronx.set_strict_fallback(True)
    try:
        results = compiled(bits.to(device), saved.to(device), dtype)
    finally:
        torch_neuronx.set_strict_fallback(False)
    for result, reference in zip(results, expected, strict=True):
        assert result.dtype == dtype and result.device.type == "neuron"
        assert result.shape == reference.shape and result.stride() == reference.stride()
        torch.testing.assert_close(result.cpu().view(torch.uint8), reference.view(torch.uint8), rtol=0, atol=0)


def test_bytes_as_copies_the_bytes_in_the_other_dtype():
    bits = torch.tensor([[0, 127], [129, 255]], dtype=torch.uint8)
    scales = bytes_as(bits, torch.float8_e8m0fnu)
    assert scales.dtype == torch.float8_e8m0fnu and scales.data_ptr() != bits.data_ptr()
    torch.testing.assert_close(scales.float(), torch.tensor([[2.0 ** -127, 1.0], [4.0, float("nan")]]),
                               equal_nan=True, rtol=0, atol=0)
    assert torch.equal(bytes_as(scales, torch.uint8), bits)
