"""SyncBatchNorm's statistics operators on ``neuron`` (csrc/shim/batch_norm_stats.cpp; only CUDA
implements them in PyTorch): a batch split as over ranks, reduced with them, gives the CPU's
``BatchNorm`` of the whole batch — output, running estimates and gradients (SyncBatchNorm itself
under DDP: tests/distributed/sharding_worker.py)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

EPS, MOMENTUM = 1e-5, 0.1
SHARES = (5, 2, 9)  # uneven per-rank batches, as SyncBatchNorm allows
SPATIAL = (3, 5)
COUNTS = [n * SPATIAL[0] * SPATIAL[1] for n in SHARES]  # SyncBatchNorm's counts: values per channel


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    # Another summation order than the CPU's batch norm; bf16 rounds the input and the output.
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}


def batch(dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    x = torch.randn(sum(SHARES), 4, *SPATIAL, generator=torch.Generator().manual_seed(0)).to(dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def synced_forward(x: torch.Tensor, weight, bias, running_mean, running_var) -> tuple[list[torch.Tensor], ...]:
    """What SyncBatchNorm's forward does, each share standing for a rank."""
    parts = [p.to("neuron") for p in x.split(SHARES)]
    stats = [torch.batch_norm_stats(p, EPS) for p in parts]
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        parts[0], torch.stack([m for m, _ in stats]), torch.stack([s for _, s in stats]), running_mean, running_var,
        MOMENTUM, EPS, torch.tensor(COUNTS, dtype=torch.float32, device="neuron"))
    outs = [torch.batch_norm_elemt(p, weight, bias, mean, invstd, EPS) for p in parts]
    return parts, outs, mean, invstd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_the_split_batch_normalizes_as_the_cpus_batch_norm_of_the_whole(device, dtype, channels_last):
    x = batch(dtype, channels_last)
    g = torch.Generator().manual_seed(1)
    weight, bias = torch.rand(4, generator=g) + 0.5, torch.randn(4, generator=g)
    rm, rv = torch.randn(4, generator=g), torch.rand(4, generator=g) + 0.5
    dev_rm, dev_rv = rm.to(device), rv.to(device)
    torch_neuronx.set_strict_fallback(True)
    try:
        parts, outs, mean, invstd = synced_forward(x, weight.to(device), bias.to(device), dev_rm, dev_rv)
    finally:
        torch_neuronx.set_strict_fallback(False)
    assert mean.dtype == invstd.dtype == torch.float32  # CUDA's accumulate type
    assert all(o.dtype == dtype and o.shape == p.shape and o.stride() == p.stride() for o, p in zip(outs, parts))
    expected = F.batch_norm(x.float(), rm, rv, weight, bias, training=True, momentum=MOMENTUM, eps=EPS)
    torch.testing.assert_close(torch.cat([o.cpu() for o in outs]).float(), expected, **tolerance(dtype))
    torch.testing.assert_close(dev_rm.cpu(), rm, rtol=1e-5, atol=1e-6)  # updated in place, unbiased variance
    torch.testing.assert_close(dev_rv.cpu(), rv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
def test_the_split_backward_gives_the_cpus_batch_norm_gradients(device, affine):
    x = batch(torch.float32, channels_last=False)
    g = torch.Generator().manual_seed(2)
    grad = torch.randn(x.shape, generator=g)
    weight = (torch.rand(4, generator=g) + 0.5) if affine else None
    bias = torch.randn(4, generator=g) if affine else None
    # The CPU's batch norm and its autograd on the whole batch.
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    F.batch_norm(leaves[0], None, None, leaves[1], leaves[2], training=True, eps=EPS).backward(grad)
    dev_w = None if weight is None else weight.to(device)
    parts, _, mean, invstd = synced_forward(x, dev_w, None if bias is None else bias.to(device), None, None)
    grads = [p.to(device) for p in grad.split(SHARES)]
    reduced = [torch.batch_norm_backward_reduce(dy, p, mean, invstd, dev_w, True, affine, affine)
               for dy, p in zip(grads, parts)]
    sum_dy, sum_dy_xmu = (torch.stack([r[i] for r in reduced]).sum(0) for i in (0, 1))  # the all-reduce
    counts = torch.tensor(COUNTS, dtype=torch.int32, device=device)
    grad_input = torch.cat([torch.batch_norm_backward_elemt(dy, p, mean, invstd, dev_w, sum_dy, sum_dy_xmu, counts)
                            .cpu() for dy, p in zip(grads, parts)])
    torch.testing.assert_close(grad_input, leaves[0].grad, rtol=1e-5, atol=1e-5)
    if affine:  # each rank's share; DDP sums them
        torch.testing.assert_close(sum(r[2] for r in reduced).cpu(), leaves[1].grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sum(r[3] for r in reduced).cpu(), leaves[2].grad, rtol=1e-5, atol=1e-5)
    else:
        assert all(r[2] is None and r[3] is None for r in reduced)  # undefined, as CUDA returns them


def test_bad_shapes_name_the_operator_and_the_device_stays_usable(device):
    x = torch.randn(4, 3, 2, device=device)
    with pytest.raises(RuntimeError, match=r"batch_norm_elemt on neuron: expected mean of size \[3\]"):
        torch.batch_norm_elemt(x, None, None, torch.zeros(2, device=device), torch.ones(3, device=device), EPS)
    with pytest.raises(RuntimeError, match="batch_norm_stats on neuron: expected an input of at least 2 dim"):
        torch.batch_norm_stats(torch.randn(5, device=device), EPS)
    with pytest.raises(RuntimeError, match="batch_norm_gather_stats_with_counts on neuron: expected mean and invstd"):
        torch.batch_norm_gather_stats_with_counts(x, torch.zeros(2, 3, device=device), torch.ones(2, 3, device=device),
                                                  None, None, MOMENTUM, EPS, torch.ones(3, device=device))
    mean, invstd = torch.batch_norm_stats(x, EPS)
    var, expected = torch.var_mean(x.cpu(), [0, 2], correction=0)
    torch.testing.assert_close(mean.cpu(), expected)
    torch.testing.assert_close(invstd.cpu(), (var + EPS).rsqrt())
