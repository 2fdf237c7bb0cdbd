"""scaled_dot_product_attention on the device runs the kernel the CPU chooses (its fused flash
attention for CPU, same code on device memory), so results and gradients are bit-identical to
the CPU's in every dtype, including rows of NaNs; the device does not wait for its queue to choose."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from helpers import DEVICE


def attention(device, dtype, nan_row: bool, **kwargs):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, dtype=dtype) for _ in range(3))
    if nan_row:
        q[0, 0, 3] = float("nan")
    mask = kwargs.pop("mask", None)
    if mask is not None:
        kwargs["attn_mask"] = mask.to(device)
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, **kwargs)
    out.float().nan_to_num().square().sum().backward()
    return [out.detach(), *(t.grad for t in leaves)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["plain", "causal", "nan_row", "bool_mask", "float_mask", "scale"])
def test_attention_is_bit_identical_to_the_cpu(dtype, case):
    kwargs = {"causal": dict(is_causal=True), "scale": dict(scale=0.3),
              "bool_mask": dict(mask=torch.rand(8, 8) > 0.3),
              "float_mask": dict(mask=torch.randn(8, 8).to(dtype))}.get(case, {})
    torch_neuronx.clear_op_tracking()
    device_results = attention(DEVICE, dtype, case == "nan_row", **dict(kwargs))
    cpu_results = attention("cpu", dtype, case == "nan_row", **dict(kwargs))
    for got, want in zip(device_results, cpu_results):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)  # the same CPU kernel
    assert torch_neuronx.get_fallback_ops() == {}


def test_the_choice_of_kernel_does_not_wait_for_the_queue():
    import threading
    q = torch.randn(1, 2, 4, 8, device="neuron:1")
    F.scaled_dot_product_attention(q, q, q)  # builds the kernel
    torch.neuron.synchronize(1)
    gate = threading.Event()
    timer = threading.Timer(20, gate.set)
    timer.start()
    torch_neuronx._C._launch_python_kernel(1, gate.wait, "test gate", wait=False)
    out = F.scaled_dot_product_attention(q, q, q)  # queued behind the gate, not waiting for it
    still_held = timer.is_alive() and not gate.is_set()
    gate.set()
    timer.cancel()
    assert still_held
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu()), rtol=0, atol=0)
