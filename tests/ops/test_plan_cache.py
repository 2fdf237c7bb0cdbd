"""A signature's first launch builds its plan (synchronously: it runs the kernel, records the output
layouts and checks the out= overload); later launches of the signature run the cached plan as one
queued kernel. A list of bools (the backwards' ``output_mask``, which decides which outputs
exist) is part of the signature: a call that takes one is planned like any other, and another
mask is another plan. A list of floats (a histogram's ``range``) is numbers, as scalars are: one
plan serves every value."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_neuronx
from helpers import DEVICE


def _layer_norm_backward(device: str) -> tuple[Callable[..., Any], list[Any]]:
    g = torch.Generator().manual_seed(0)
    x, grad, w, b = (torch.randn(shape, generator=g).to(device) for shape in ((6, 8), (6, 8), (8,), (8,)))
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [8], w, b, 1e-5)
    return torch.ops.aten.native_layer_norm_backward, [grad, x, [8], mean, rstd, w, b]


def _group_norm_backward(device: str) -> tuple[Callable[..., Any], list[Any]]:
    g = torch.Generator().manual_seed(1)
    x, grad, w = (torch.randn(shape, generator=g).to(device) for shape in ((2, 4, 5), (2, 4, 5), (4,)))
    _, mean, rstd = torch.ops.aten.native_group_norm(x, w, None, 2, 4, 5, 2, 1e-5)
    return torch.ops.aten.native_group_norm_backward, [grad, x, mean, rstd, w, 2, 4, 5, 2]


def _histogram(device: str) -> tuple[Callable[..., Any], list[Any]]:
    return (lambda x, bins, low_high: torch.ops.aten.histogram.bin_ct(x, bins, range=low_high),
            [torch.linspace(-3, 3, 50).to(device), 6])


# Each case: its inputs, and two values of its list argument (the last argument).
CASES = {
    "native_layer_norm_backward": (_layer_norm_backward, [True, True, True], [True, False, False]),
    "native_group_norm_backward": (_group_norm_backward, [True, True, True], [False, True, True]),
    "histogram.bin_ct": (_histogram, [-4.0, 4.0], [-1.0, 1.0]),
}


def _kernels() -> int:
    torch.neuron.synchronize()
    return sum(torch_neuronx.runtime.kernel_counts(DEVICE).values())


def _assert_same(got: Any, expected: Any) -> None:
    for g, e in zip(got, expected, strict=True):
        if e is None:  # an output the mask left out
            assert g is None
        else:
            torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("case", CASES)
def test_a_repeated_call_with_a_list_argument_is_one_queued_kernel(case):
    make, first, second = CASES[case]
    op, cpu_args = make("cpu")
    _, args = make(DEVICE)
    for values in (first, second, first, second):
        op(*args, values)  # the first launch of each signature builds its plan
        before = _kernels()
        got = op(*args, values)
        assert _kernels() - before == 1
        _assert_same(got, op(*cpu_args, values))
