"""PyTorch's optimizer database (`common_optimizers.optim_db`, `@optims`) on `neuron` against the CPU.

For every optimizer configuration PyTorch lists for the device (`optim_inputs_func`), in each
implementation it supports (for-loop, foreach, fused), a few steps on a quadratic loss must give
the CPU's parameters and optimizer state. The fast class covers SGD, Adam and AdamW;
`TestOptimSweep` (slow) all of optim_db.
"""
from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

import torch_neuronx  # noqa: F401  (registers `neuron` before common_device_type picks test bases)

# isort: split
from torch.testing._internal.common_optimizers import OptimizerInfo, optim_db, optims
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_map

from helpers import instantiate_neuron_suites

FAST_OPTIMIZERS = {"SGD", "Adam", "AdamW"}
STEPS = 3


def _cpu(tree):
    return tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, tree)


def _train(optim_info: OptimizerInfo, kwargs: dict, device: str):
    """Parameters and optimizer state after STEPS steps (2-D parameters: Muon takes only matrices)."""
    torch.manual_seed(0)
    params = [torch.randn(4, 3), torch.randn(2, 5)]
    targets = [torch.randn_like(p).to(device) for p in params]
    params = [p.to(device).requires_grad_() for p in params]
    opt = optim_info.optim_cls(params, **tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t,
                                                  kwargs))

    def closure():  # LBFGS re-evaluates the loss; the others call it once per step
        opt.zero_grad()
        loss = sum(((p - t) ** 2).sum() for p, t in zip(params, targets))
        loss.backward()
        return loss

    for _ in range(STEPS):
        opt.step(closure)
    return _cpu(params), _cpu(list(opt.state_dict()["state"].values()))


def _suite(name: str, optim_list: Sequence[OptimizerInfo]) -> type[TestCase]:
    class Suite(TestCase):
        @optims(optim_list, dtypes=(torch.float32,))
        def test_steps_match_cpu(self, device, dtype, optim_info):
            if optim_info.only_supports_sparse_grads:
                pytest.skip("sparse gradients are not supported on the device")
            impls = [{}] + [{impl: True} for impl in ("foreach", "fused") if impl in optim_info.supported_impls
                            and (impl != "fused" or "cpu" in optim_info.supports_fused_on)]
            for optim_input in optim_info.optim_inputs_func(device=device):
                for impl in impls:
                    kwargs = {**optim_input.kwargs, **impl}
                    self.assertEqual(_train(optim_info, kwargs, device), _train(optim_info, _cpu(kwargs), "cpu"),
                                     msg=f"{optim_input.desc} {impl}")

    Suite.__name__ = Suite.__qualname__ = name
    return Suite


TestOptim = _suite("TestOptim", [o for o in optim_db if o.name in FAST_OPTIMIZERS])
TestOptimSweep = _suite("TestOptimSweep", optim_db)
instantiate_neuron_suites(globals(), TestOptim, TestOptimSweep)
