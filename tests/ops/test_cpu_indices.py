"""Advanced indexing of neuron tensors with index tensors on the CPU, as CUDA accepts them.

The indices are moved to the device (reads, `x[idx] = v`, `index_put_`, accumulate and boolean
masks); operators that are not advanced indexing (index_select) refuse CPU tensors as on CUDA.
"""
from __future__ import annotations

import pytest
import torch

import torch_neuronx
from helpers import assert_same

INDICES = {
    "long": lambda: (torch.tensor([0, 2, 0]),),
    "int32": lambda: (torch.tensor([3, 1], dtype=torch.int32),),
    "bool_mask": lambda: (torch.tensor([True, False, True, False]),),
    "two_dims": lambda: (torch.tensor([0, 3]), torch.tensor([4, 1])),
    "slice_then_index": lambda: (slice(None), torch.tensor([1, 1, 4])),
}


def _base() -> torch.Tensor:
    return torch.arange(20.0).view(4, 5)


@pytest.mark.parametrize("kind", INDICES)
def test_read(kind):
    idx = INDICES[kind]()
    x = _base()
    assert_same(x[idx], x.to("neuron")[idx])
    assert torch_neuronx.get_fallback_ops() == {}


@pytest.mark.parametrize("kind", INDICES)
def test_setitem_scalar_and_tensor(kind):
    idx = INDICES[kind]()
    x, xd = _base(), _base().to("neuron")
    x[idx] = -1.0
    xd[idx] = -1.0
    assert_same(x, xd)
    value = torch.randn(x[idx].shape)
    x[idx] = value
    xd[idx] = value.to("neuron")
    assert_same(x, xd)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("kind", ["long", "bool_mask", "two_dims"])
def test_index_put(kind, accumulate):
    idx = INDICES[kind]()
    x = _base()
    values = torch.randn(x[idx].shape)
    expected = x.clone().index_put_(idx, values, accumulate=accumulate)
    xd = x.to("neuron")
    assert xd.index_put_(idx, values.to("neuron"), accumulate=accumulate) is xd
    assert_same(expected, xd)
    assert_same(x.index_put(idx, values, accumulate=accumulate),
                x.to("neuron").index_put(idx, values.to("neuron"), accumulate=accumulate))


def test_gradient_through_cpu_indices():
    idx = torch.tensor([0, 2, 0])
    x = torch.randn(4, 5, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    (x[idx] * 2).sum().backward()
    (xd[idx] * 2).sum().backward()
    assert_same(x.grad, xd.grad)


def test_index_select_refuses_cpu_index_like_cuda():
    with pytest.raises(RuntimeError, match=r"aten::index_select.*\.to\(\"neuron\"\)"):
        _base().to("neuron").index_select(0, torch.tensor([0, 1]))
