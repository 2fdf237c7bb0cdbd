"""PyTorch's nn.Module database (`common_modules.module_db`, `@modules`) on `neuron` against the CPU.

Mirrors upstream `test/test_modules.py::test_forward` (not shipped with the wheel) with the CPU as
the reference: each module input is built on the CPU, the module (same initial weights) and its
inputs are copied to the device, and outputs and gradients (of the sum of the outputs, with
respect to inputs and parameters) are compared, in training and in eval mode. The fast class
covers the modules of common models; `TestModulesSweep` (slow) all of module_db.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch

import torch_neuronx  # noqa: F401  (registers `neuron` before common_device_type picks test bases)

# isort: split
from torch.testing._internal.common_modules import ModuleInfo, module_db, modules
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_map

from helpers import instantiate_neuron_suites, tensors

FAST_MODULES = {"nn.Linear", "nn.Conv2d", "nn.BatchNorm2d", "nn.LayerNorm", "nn.RMSNorm", "nn.GroupNorm",
                "nn.Embedding", "nn.GELU", "nn.MaxPool2d", "nn.AdaptiveAvgPool2d", "nn.CrossEntropyLoss",
                "nn.MultiheadAttention", "nn.TransformerEncoderLayer", "nn.LSTM", "nn.GRU"}
# Outputs drawn from the generator (random pooling regions): CPU and device draw differently.
RANDOM_MODULES = {"nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d"}


# Modules whose device path is not the CPU's kernels, by a word of their name: attention takes
# the CPU's flash kernel on the CPU and the math path on the device (expectations.json); LSTM
# and GRU run the fused cells PyTorch sends a PrivateUse1 device to (csrc/shim/rnn_cells.cpp),
# which sum the gates in another order. nn.RNN runs the same operators on both, yet some of
# module_db's inputs differ by one float32 ulp (not yet explained: the device path adds a clone,
# which may hand the GEMM another operand layout).
OTHER_PATH = ("Attention", "Transformer", "RNN", "LSTM", "GRU")


def _tolerance(name: str, dtype: torch.dtype) -> dict[str, float]:
    """Exact where the device runs the CPU's own kernels; elsewhere a few ulps of the dtype
    times the length of the differently ordered reduction."""
    if any(word in name for word in OTHER_PATH):
        eps = torch.finfo(dtype).eps
        return dict(atol=64 * eps, rtol=64 * eps)
    return dict(atol=0.0, rtol=0.0)


class _Mover:
    """Copies tensors to the device once each: inputs passed twice (KLDivLoss(x, x)) stay one tensor."""

    def __init__(self, device: str) -> None:
        self.device, self.moved = device, {}

    def __call__(self, t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in self.moved:
            self.moved[id(t)] = t.detach().to(self.device).requires_grad_(t.requires_grad)
        return self.moved[id(t)]


def _forward_backward(module: torch.nn.Module, args, kwargs):
    """Outputs, and gradients of their sum with respect to the inputs and parameters."""
    outputs = module(*args, **kwargs)
    leaves = [t for t in tensors((args, kwargs)) if t.requires_grad] + list(module.parameters())
    floats = [o for o in tensors(outputs) if o.requires_grad]
    if not floats:
        return outputs, None
    return outputs, torch.autograd.grad(sum(o.sum() for o in floats), leaves, allow_unused=True)


def _suite(name: str, module_list: Sequence[ModuleInfo]) -> type[TestCase]:
    class Suite(TestCase):
        @modules(module_list, allowed_dtypes=(torch.float32,))
        def test_forward_backward(self, device, dtype, module_info, training):
            if module_info.name in RANDOM_MODULES:
                pytest.skip("the module's output is random")
            for module_input in module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                                               requires_grad=True, training=training):
                if module_input.forward_input is None:
                    continue
                torch.manual_seed(0)
                ctor = module_input.constructor_input
                cpu_module = module_info.module_cls(*ctor.args, **ctor.kwargs).to(dtype).train(training)
                args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                module = copy.deepcopy(cpu_module).to(device)
                device_inputs = tree_map(_Mover(device), (args, kwargs))
                actual = _forward_backward(module, *device_inputs)
                expected = _forward_backward(cpu_module, args, kwargs)
                self.assertEqual(tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual),
                                 expected, msg=module_input.desc, **_tolerance(module_info.name, dtype))

    Suite.__name__ = Suite.__qualname__ = name
    return Suite


TestModules = _suite("TestModules", [m for m in module_db if m.name in FAST_MODULES])
TestModulesSweep = _suite("TestModulesSweep", module_db)
instantiate_neuron_suites(globals(), TestModules, TestModulesSweep)
