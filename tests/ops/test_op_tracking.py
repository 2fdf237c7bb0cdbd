"""Operator tracking names what the user called (torch_neuronx/ops/tracking.py): the operators
the CPU's profiler shows for a call are recorded for the same call on the device, composite
ones included, and a composite whose part fell back is a fallback under both names."""
from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
from helpers import run_py
from torch_neuronx.ops.lowering_table import LOWERINGS
from torch_neuronx.ops.tracking import get_fallback_kernels

# One user-level call each, on tensors made beforehand: (inputs, call).
CALLS = {
    "linear": (lambda: [torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)], lambda x, w, b: F.linear(x, w, b)),
    "full": (lambda: [torch.empty(1)], lambda d: torch.full((3,), 2.0, device=d.device)),
    "zeros": (lambda: [torch.empty(1)], lambda d: torch.zeros(3, device=d.device)),
    "ones_like": (lambda: [torch.randn(3)], torch.ones_like),
    "embedding": (lambda: [torch.tensor([0, 2]), torch.randn(3, 4)], F.embedding),
    "stack": (lambda: [torch.randn(3), torch.randn(3)], lambda a, b: torch.stack([a, b])),
    "where": (lambda: [torch.randn(3), torch.randn(3)], lambda a, b: torch.where(a > 0, a, b)),
    "pad": (lambda: [torch.randn(2, 3)], lambda x: F.pad(x, (1, 1))),
    "isfinite": (lambda: [torch.randn(3)], torch.isfinite),
    "one_hot": (lambda: [torch.tensor([0, 2, 1])], lambda i: F.one_hot(i, 3)),
    "to_dtype": (lambda: [torch.randn(3)], lambda x: x.to(torch.bfloat16)),
    "scalar_tensor": (lambda: [torch.empty(1)], lambda d: torch.scalar_tensor(2.5, device=d.device)),
    "clone": (lambda: [torch.randn(3)], torch.clone),
    "softmax": (lambda: [torch.randn(2, 5)], lambda x: F.softmax(x, dim=-1)),
    "layer_norm": (lambda: [torch.randn(2, 5)], lambda x: F.layer_norm(x, (5,))),
    "cross_entropy": (lambda: [torch.randn(4, 5), torch.tensor([0, 1, 4, 2])], F.cross_entropy),
    "einsum": (lambda: [torch.randn(2, 3), torch.randn(3, 4)], lambda a, b: torch.einsum("ij,jk->ik", a, b)),
}


# Composites that take another path on other devices than the CPU: one_hot validates its indices
# with min/max and fills zeros there, instead of the CPU's fill_.
CPU_ONLY_PARTS = {"one_hot": {"aten::fill_"}}


def cpu_call_structure(call, inputs) -> tuple[set[str], set[str]]:
    """The operators the CPU's profiler records for one call: (outermost, innermost)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call(*inputs)
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    outermost = {e.name for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")}
    innermost = {e.name for e in events if not any(c.name.startswith("aten::") for c in e.cpu_children)}
    return outermost, innermost


def base_names(ops: Iterable[str]) -> set[str]:
    """Operator names without the overload, as the profiler shows them."""
    return {name.split(".")[0] for name in ops}


# Operators with a device kernel (any overload), by the profiler's names.
LOWERED = base_names(entry.op for entry in LOWERINGS)


def device_run(call, inputs) -> tuple[dict[str, int], dict[str, int]]:
    torch.neuron.synchronize()
    torch_neuronx.clear_op_tracking()
    call(*inputs)
    torch.neuron.synchronize()
    return torch_neuronx.get_executed_ops(), torch_neuronx.get_fallback_ops()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_operators_the_user_called_are_recorded_as_executed(name):
    make, call = CALLS[name]
    inputs = make()
    outermost, innermost = cpu_call_structure(call, inputs)
    executed, fallbacks = device_run(call, [t.to("neuron") for t in inputs])
    assert fallbacks == {}
    assert outermost <= base_names(executed), (outermost, executed)
    # the low-level names are kept too: the innermost operators that have a device kernel
    kernels = innermost & LOWERED - CPU_ONLY_PARTS.get(name, set())
    assert kernels <= base_names(executed), (kernels, executed)


def test_published_names_carry_their_overload():
    """Scripts written for the published backend look for these exact names."""
    a, b = torch.randn(3, device="neuron"), torch.randn(3, device="neuron")
    torch_neuronx.clear_op_tracking()
    torch.where(a > 0, a, b)
    torch.zeros(2, device="neuron")
    assert {"aten::where.self", "aten::zeros", "aten::gt.Scalar"} <= set(torch_neuronx.get_executed_ops())


def test_a_composite_whose_part_fell_back_is_a_fallback_under_both_names():
    """float64 computes on the host by policy: linear's addmm falls back, so linear did too."""
    x, w = torch.randn(4, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    outermost, _ = cpu_call_structure(F.linear, [x, w])
    assert outermost == {"aten::linear"}
    executed, fallbacks = device_run(F.linear, [x.to("neuron"), w.to("neuron")])
    assert {"aten::linear", "aten::mm"} <= set(fallbacks), fallbacks
    assert "aten::linear" not in executed and "aten::t" not in fallbacks  # a view: no kernel
    assert set(get_fallback_kernels()) == {"aten::mm"}


def test_calls_are_counted_once_each():
    x = torch.randn(8, device="neuron")
    torch_neuronx.clear_op_tracking()
    for _ in range(5):
        F.softmax(x, dim=0)
    torch.neuron.synchronize()
    executed = torch_neuronx.get_executed_ops()
    assert executed["aten::softmax.int"] == 5 and executed["aten::_softmax"] == 5


def test_the_first_operator_of_a_process_is_recorded():
    """torch.neuron._lazy_init starts tracking before the first operator on the device runs."""
    done = run_py("""
        import torch, torch_neuronx
        torch.ones(3, device='neuron')
        print(sorted(torch_neuronx.get_executed_ops()))
    """)
    assert done.returncode == 0, done.stderr
    assert "'aten::ones'" in done.stdout, done.stdout
