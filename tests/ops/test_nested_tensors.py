"""Nested tensors (torch.nested, strided layout) on neuron against the CPU: moves, views that alias
device memory, operators run on the host (reported as fallbacks), autograd, and the default
nn.TransformerEncoder inference fast path with a padding mask."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_neuronx
from helpers import DEVICE, assert_same, to_device


@pytest.fixture(autouse=True)
def _no_prototype_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*nested tensors is in prototype stage")
        warnings.filterwarnings("ignore", message=".*ran on the CPU")
        yield


def components() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(2, 3), torch.randn(4, 3), torch.randn(1, 3)]


def assert_same_nested(cpu: torch.Tensor, dev: torch.Tensor, **tol) -> None:
    assert dev.is_nested and dev.device.type == DEVICE and dev.dtype == cpu.dtype
    for metadata in ("_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets"):
        host = getattr(dev, metadata)()
        assert host.device.type == "cpu"  # metadata stays on the host, as on the CPU and CUDA
        assert torch.equal(host, getattr(cpu, metadata)()), metadata
    assert_same(cpu.unbind(), dev.unbind(), **tol)


def test_moves_to_the_device_and_back():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    assert_same_nested(cpu, dev)
    back = dev.cpu()
    assert back.is_nested and back.device.type == "cpu"
    assert_same(cpu.to_padded_tensor(0.0), back.to_padded_tensor(0.0), check_device=False)
    assert_same_nested(cpu, torch.nested.nested_tensor(components(), device=DEVICE))
    assert_same_nested(cpu, torch.nested.as_nested_tensor([c.to(DEVICE) for c in components()]))


def test_copies_are_copies_and_dtype_conversions_convert():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    copy = dev.to(DEVICE, copy=True)
    copy.unbind()[0].zero_()
    assert_same_nested(cpu, dev)
    assert_same_nested(cpu.to(torch.bfloat16), dev.to(torch.bfloat16))
    assert_same_nested(*(t.to(torch.float16, memory_format=torch.contiguous_format) for t in (cpu, dev)))
    assert dev.cpu().values().data_ptr() != cpu.values().data_ptr()


def test_views_alias_device_memory():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    for nested in (cpu, dev):
        first, second, _ = nested.unbind()
        first.mul_(2)
        second[1:].fill_(7)
        nested.values()[-1] = -1
    assert_same_nested(cpu, dev)
    assert dev.unbind()[1].data_ptr() == dev.values().data_ptr() + 6 * dev.element_size()
    assert torch_neuronx.get_fallback_ops() == {}  # views and in-place ops on views ran on the device


def test_transposed_and_narrowed_views():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    assert_same_nested(cpu.transpose(1, 2), dev.transpose(1, 2))
    assert_same_nested(cpu.narrow(0, 1, 2), dev.narrow(0, 1, 2))
    assert_same_nested(cpu.chunk(3, -1)[1], dev.chunk(3, -1)[1])


@pytest.mark.parametrize("op", [
    lambda n: n + 1,
    lambda n: n * n,
    lambda n: F.relu(n),
    lambda n: F.softmax(n, -1),
    lambda n: F.linear(n, torch.ones(5, 3, device=n.device), torch.arange(5.0, device=n.device)),
    lambda n: torch.matmul(n, n.transpose(1, 2)),
    lambda n: F.layer_norm(n, (3,), torch.ones(3, device=n.device) * 2, torch.ones(3, device=n.device)),
], ids=["add", "mul", "relu", "softmax", "linear", "matmul", "layer_norm"])
def test_operators_run_on_the_host_and_return_nested_device_tensors(op):
    cpu = torch.nested.nested_tensor(components())
    assert_same_nested(op(cpu), op(cpu.to(DEVICE)), atol=1e-6, rtol=1e-5)
    assert torch_neuronx.get_fallback_ops(), "a host execution must be reported"


def test_in_place_operators_write_the_device_tensor():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    storage = dev.values().data_ptr()
    assert cpu.add_(1).mul_(3) is cpu
    assert dev.add_(1).mul_(3) is dev
    assert dev.values().data_ptr() == storage
    assert_same_nested(cpu, dev)


def test_padding_and_unpadding():
    cpu = torch.nested.nested_tensor(components())
    dev = cpu.to(DEVICE)
    assert_same(cpu.to_padded_tensor(-1.0), dev.to_padded_tensor(-1.0))
    assert_same(cpu.to_padded_tensor(0.0, (3, 5, 4)), dev.to_padded_tensor(0.0, (3, 5, 4)))
    padded = torch.randn(2, 4, 3)
    sizes = torch.tensor([[2, 3], [4, 3]])
    assert_same_nested(torch._nested_from_padded(padded, sizes), torch._nested_from_padded(to_device(padded), sizes))


def test_gradients_match_the_cpu():
    def run(device):
        weight = torch.randn(5, 3, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
        nested = torch.nested.nested_tensor(components(), device=device, requires_grad=True)
        loss = F.linear(nested, weight).relu().to_padded_tensor(0.0).square().sum()
        loss.backward()
        return loss, weight.grad, nested.grad.to_padded_tensor(0.0)
    assert_same(run("cpu"), run(DEVICE))


def test_jagged_layout_runs_on_dense_device_kernels():
    # A jagged nested tensor is a Python subclass over dense values and offsets tensors.
    def run(device):
        weight = torch.randn(5, 3, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
        nested = torch.nested.nested_tensor(components(), layout=torch.jagged, device=device, requires_grad=True)
        out = F.softmax(F.linear(nested, weight).relu() * 2, -1)
        loss = out.to_padded_tensor(0.0).sum() + out.values().square().sum()
        loss.backward()
        return out.values(), loss, weight.grad, nested.grad.values()
    assert_same(run("cpu"), run(DEVICE))
    padding = {"aten::_jagged_to_padded_dense_forward", "aten::_padded_dense_to_jagged_forward"}
    assert set(torch_neuronx.ops.tracking.get_fallback_kernels()) <= padding


def test_printing_shows_the_components():
    cpu = torch.nested.nested_tensor(components())
    text = repr(cpu.to(DEVICE))
    assert text.count("device='neuron:0'") == 4  # each component and the nested tensor
    assert text.replace(", device='neuron:0'", "") == repr(cpu)


def test_strict_mode_refuses_the_host_execution():
    dev = torch.nested.nested_tensor(components(), device=DEVICE)
    torch_neuronx.set_strict_fallback(True)
    try:
        with pytest.raises(RuntimeError, match=r"aten::add\.Tensor.*TORCH_NEURONX_STRICT_FALLBACK"):
            dev + 1
    finally:
        torch_neuronx.set_strict_fallback(False)
    assert_same_nested(torch.nested.nested_tensor(components()) + 1, dev + 1)


def test_transformer_encoder_fast_path_with_a_padding_mask():
    # The defaults (enable_nested_tensor=True, post-norm layers): in eval mode without gradients,
    # a left-aligned padding mask turns the batch into a nested tensor; padded positions come
    # back as zeros.
    torch.manual_seed(0)
    make = lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2).eval()  # noqa: E731
    cpu, dev = make(), make().to(DEVICE)
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(3, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    with torch.no_grad():
        expected = cpu(x, src_key_padding_mask=mask)
        assert_same(expected, dev(to_device(x), src_key_padding_mask=to_device(mask)))
    assert expected[2, 1:].abs().sum() == 0  # the nested path ran on the CPU too
    assert "aten::_transformer_encoder_layer_fwd" in torch_neuronx.get_fallback_ops()


def test_memory_is_returned_after_nested_work():
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    dev = torch.nested.nested_tensor(components(), device=DEVICE)
    result = F.softmax(dev * 2, -1).to_padded_tensor(0.0)
    del dev, result
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before
