"""Regression tests for silent wrong results found by random differential programs: out= into
views with a storage offset, aliasing between arguments on first and cached launches, and list
inputs overlapping an out= argument. Each program runs on the CPU and on the device, twice (a
signature's first launch builds its kernel, later ones run the cached plan), and every outcome
is compared: values, shapes, strides, storage offsets of the views and their bases, or the
exception class and message."""
from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

from helpers import DEVICE


def outcome(program: Callable[[str], list[torch.Tensor]], device: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resize deprecation warnings, on both devices
        try:
            tensors = program(device)
        except RuntimeError as error:
            return type(error), str(error).split("\n")[0]
    torch.neuron.synchronize()
    return [(t.cpu().tolist(), tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors]


def out_into_an_offset_view(device):
    base = torch.zeros(5, device=device)
    out = base.narrow(0, 2, 1)
    torch.abs(torch.tensor([-1.0, -2.0], device=device), out=out)
    return [base, out]


def matmul_out_into_an_offset_view(device):
    base = torch.zeros(5, device=device)
    out = base[3:5]  # matmul resizes it internally for 1-D @ 2-D
    torch.matmul(torch.ones(3, device=device), torch.ones(3, 2, device=device), out=out)
    return [base, out]


def out_into_an_offset_view_of_a_matrix(device):
    base = torch.zeros(4, 6, device=device)
    out = base[1:3, 2:4]  # non-contiguous, offset 8, resized from (2, 2) to (2, 3): warns
    torch.add(torch.ones(2, 3, device=device), 1, out=out)
    return [base, out]


def add_into_its_input_after_a_distinct_output(device):
    y = torch.ones(2, 3, device=device)
    torch.add(torch.zeros(3, device=device), y, out=torch.zeros(3, device=device))  # builds the signature
    x = torch.full((3,), 5.0, device=device)
    torch.add(x, y, out=x)  # the CPU refuses: x cannot be resized, it is an input
    return [x]


def index_select_into_its_input_after_a_distinct_output(device):
    idx = torch.tensor([0, 1], device=device)
    torch.index_select(torch.randn(2, 3, device=device), 1, idx, out=torch.empty(0, device=device))
    x = torch.empty(0, 3, device=device)
    torch.index_select(x, 1, idx, out=x)
    return [x]


def index_put_of_an_expanded_tensor_into_itself(device):
    x = torch.tensor(1.0, device=device).expand(4)
    x[torch.tensor([0, 1, 2, 3], device=device)] = x
    return [x]


def cat_into_an_overlapping_input(device):
    a = torch.arange(4.0, device=device)
    b = torch.zeros(4, device=device)
    torch.cat([a[:2], b[:2]], out=a)
    return [a]


def stack_into_an_overlapping_input(device):
    a = torch.arange(4.0, device=device)
    torch.stack([a[:2], a[2:]], out=a.view(2, 2))
    return [a]


def add_into_its_input_legally(device):
    x = torch.arange(6.0, device=device).view(2, 3)
    torch.add(x, x, out=x)  # the same tensor three times: allowed, in place
    return [x]


PROGRAMS = [out_into_an_offset_view, matmul_out_into_an_offset_view, out_into_an_offset_view_of_a_matrix,
            add_into_its_input_after_a_distinct_output, index_select_into_its_input_after_a_distinct_output,
            index_put_of_an_expanded_tensor_into_itself, cat_into_an_overlapping_input,
            stack_into_an_overlapping_input, add_into_its_input_legally]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_the_first_and_the_cached_launch_match_the_cpu(program):
    expected = outcome(program, "cpu")
    for launch in ("first", "cached"):
        assert outcome(program, DEVICE) == expected, launch


def test_a_distinct_out_after_an_aliased_one_still_runs():
    """The aliased call of a signature does not poison the plan of the distinct one."""
    for device in ("cpu", DEVICE):
        x = torch.arange(3.0, device=device)
        torch.add(x, x, out=x)
        out = torch.empty(3, device=device)
        torch.add(x, x, out=out)
        assert out.cpu().tolist() == [0.0, 4.0, 8.0]


# Found by torch_neuronx.testing.fuzz.
def cat_of_a_tensor_into_itself(device):
    x = torch.arange(10.0, device=device).view(2, 5).t()
    torch.cat([x, x], out=x)  # the CPU refuses (the output is an input); x must not change on the device
    return [x]


def cat_into_an_expanded_output(device):
    out = torch.ones(1, device=device).expand(2)  # stride 0: the kernel grows its storage
    torch.cat([torch.arange(10.0, device=device).view(1, 2, 5)] * 2, out=out)
    return [out]


def sum_into_an_expanded_output(device):
    out = torch.ones(1, device=device, dtype=torch.int64).expand(5)
    torch.sum(torch.arange(6, device=device), 0, out=out)
    return [out]


def reduction_into_an_expanded_output_that_grows(device):
    out = torch.ones(1, device=device).expand(3)  # one element of storage, resized to (3, 1)
    torch.sum(torch.ones(3, 3, 1, device=device), 0, out=out)
    return [out]


FUZZER_FINDINGS = [cat_of_a_tensor_into_itself, cat_into_an_expanded_output, sum_into_an_expanded_output,
                   reduction_into_an_expanded_output_that_grows]


@pytest.mark.parametrize("program", FUZZER_FINDINGS, ids=[p.__name__ for p in FUZZER_FINDINGS])
def test_fuzzer_findings_match_the_cpu(program):
    expected = outcome(program, "cpu")
    if isinstance(expected, tuple):  # the CPU refused: the device refuses and leaves x as it was
        assert outcome(program, DEVICE)[0] is expected[0]
        return
    for launch in ("first", "cached"):
        assert outcome(program, DEVICE) == expected, launch


def test_in_place_random_fill_of_a_strided_view_draws_as_on_the_cpu():
    """The CPU's normal_ fills a noncontiguous tensor in another order than a contiguous one; the
    device runs the kernel on a copy with the view's own layout, so it draws the same values."""
    results = []
    for device in ("cpu", DEVICE):
        torch.manual_seed(0)
        base = torch.zeros(5, 10, device=device)
        base[:, ::2].normal_(0, 5)
        base[1:, 1::2].uniform_()
        results.append(base.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)  # the same CPU kernels and streams
