"""Fused AdamW step against torch.optim.AdamW(foreach=False)."""
import pytest
import torch
from library_helpers import DTYPES, assert_close

import nki
from nki.kernels import adamw_step

HYPER = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(128, 64), (130, 2100), (1, 5)])
def test_adamw_matches_torch_over_steps(shape, dtype):
    param = torch.randn(shape).to(dtype)
    ref = torch.nn.Parameter(param.clone())
    opt = torch.optim.AdamW([ref], foreach=False, **HYPER)
    exp_avg, exp_avg_sq = torch.zeros_like(param), torch.zeros_like(param)
    for step in range(1, 4):
        grad = torch.randn(shape).to(dtype)
        ref.grad = grad.clone()
        opt.step()
        adamw_step(param, grad, exp_avg, exp_avg_sq, HYPER["lr"], *HYPER["betas"], HYPER["eps"],
                   HYPER["weight_decay"], step)
        state = opt.state[ref]
        assert_close(exp_avg, state["exp_avg"], dtype)
        assert_close(exp_avg_sq, state["exp_avg_sq"], dtype)
        assert_close(param, ref.detach(), dtype)


def test_adamw_cost_estimate():
    rows, cols = 256, 512
    tensors = [torch.randn(rows, cols) for _ in range(4)]
    adamw_step(*tensors, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    report = nki.simulator.last_report()
    assert report.tensor_flops == 0
    assert report.dma_bytes == 7 * rows * cols * 4  # four tensors read, three written
    assert report.engine_instructions["ScalarE"] == rows // 128  # the sqrt
