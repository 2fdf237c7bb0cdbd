"""The integer paths of mixture-of-experts routing code, which CUDA runs and our device must too.

Transformers counts the tokens per expert with ``torch.histc`` on an integer tensor on every
device but the CPU and MPS (CUDA counts integers; the CPU kernel refuses them). The device
counts them as CUDA does, in the input's dtype; the references are independent counts on the
CPU (``bincount``, or the float histogram of the same values)."""
from __future__ import annotations

import pytest
import torch

from helpers import DEVICE, assert_same, check_twice

INTEGERS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def expert_ids(n: int = 64, experts: int = 8, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(0, experts, (n,), generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_histc_counts_as_cuda_does_in_the_inputs_dtype(dtype):
    ids = expert_ids(dtype=dtype)
    counts = torch.histc(ids.to(DEVICE), bins=8, min=0, max=7)
    assert counts.dtype == dtype and counts.device.type == DEVICE
    assert_same(torch.bincount(ids.long(), minlength=8).to(dtype), counts)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_histc_ranges_match_the_float_histogram(dtype):
    """Out-of-range values ignored, the maximum in the last bin, min == max taking the data's
    range: the float histogram's rules, with counts in the integer dtype."""
    values = torch.tensor([-3, 0, 1, 2, 5, 5, 9, 12, 12, 40], dtype=dtype)
    for bins, lo, hi in ((4, 0, 12), (5, -5, 5), (3, 0, 0), (7, 12, 12)):
        expected = torch.histc(values.double(), bins=bins, min=lo, max=hi).to(dtype)
        assert_same(expected, torch.histc(values.to(DEVICE), bins=bins, min=lo, max=hi))


def test_integer_histc_out_and_its_dtype_check():
    ids = expert_ids(dtype=torch.int32)
    out = torch.empty(0, dtype=torch.int32, device=DEVICE)
    torch.histc(ids.to(DEVICE), bins=8, min=0, max=7, out=out)
    assert_same(torch.bincount(ids.long(), minlength=8).int(), out)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.histc(ids.to(DEVICE), bins=8, min=0, max=7, out=torch.empty(8, device=DEVICE))


def test_float_histc_is_unchanged():
    values = torch.randn(50, generator=torch.Generator().manual_seed(1))
    check_twice(lambda t: torch.histc(t, bins=6, min=-1, max=1), values)


def test_the_rest_of_moe_routing_on_integers():
    """bincount, cumsum, scatter_add, sort, topk and one_hot on expert ids, as routing code uses
    them, against the CPU."""
    ids = expert_ids()
    weights = torch.rand(64, generator=torch.Generator().manual_seed(2))
    check_twice(lambda i: torch.bincount(i, minlength=8), ids)
    check_twice(lambda i: torch.cumsum(torch.bincount(i, minlength=8), 0), ids)
    check_twice(lambda i: torch.zeros(8, dtype=torch.long).to(i.device).scatter_add(0, i, torch.ones_like(i)), ids)
    check_twice(lambda i: torch.sort(i, stable=True), ids)
    check_twice(lambda w: torch.topk(w.view(8, 8), k=2, dim=-1), weights)
    check_twice(lambda i: torch.nn.functional.one_hot(i, num_classes=8).permute(1, 0), ids)


def test_integer_histc_compiles_and_counts_as_in_eager():
    """A compiled MoE router counts expert ids with histc too (the executable calls the host's
    kernel, which refuses integers: the lowering counts them as eager does)."""
    def route(ids: torch.Tensor) -> torch.Tensor:
        return torch.histc(ids, bins=8, min=0, max=7).cumsum(0)

    torch._dynamo.reset()
    try:
        ids = expert_ids(dtype=torch.int32)
        compiled = torch.compile(route, backend="neuron")(ids.to(DEVICE))
    finally:
        torch._dynamo.reset()
    assert_same(torch.bincount(ids.long(), minlength=8).cumsum(0).to(torch.int64), compiled)
