"""torch_neuronx.register_cpu_kernel: another package's CPU operator gets a device kernel that
runs its CPU kernel on the device's memory (no copies to the host, nothing in the fallback
record), with the CPU's results for functional, in-place and data-dependent operators."""
from __future__ import annotations

import pytest
import torch

import torch_neuronx

# A library of CPU operators as another package defines them (vLLM's _C is one): functional,
# writing into an argument (a view of a bigger tensor), and with a data-dependent output shape.
_lib = torch.library.Library("neuron_cpu_kernel_test", "DEF")
_lib.define("scaled_cumsum(Tensor x, float scale) -> Tensor")
_lib.define("rotate_(Tensor(a!) x, Tensor positions) -> ()")
_lib.define("positives(Tensor x) -> Tensor")
_lib.define("only_cuda(Tensor x) -> Tensor")
_lib.define("arange_into(Tensor(a!) out, int n) -> ()")
_lib.impl("scaled_cumsum", lambda x, scale: torch.cumsum(x, 0) * scale, "CPU")


def _rotate_(x: torch.Tensor, positions: torch.Tensor) -> None:
    x.copy_(x.roll(1, -1) * positions[:, None])


_lib.impl("rotate_", _rotate_, "CPU")


def _arange_into(out: torch.Tensor, n: int) -> None:
    out.resize_(n).copy_(torch.arange(n, dtype=out.dtype))  # a kernel that resizes what it writes


_lib.impl("arange_into", _arange_into, "CPU")
_lib.impl("positives", lambda x: x[x > 0], "CPU")
_lib.impl("only_cuda", lambda x: x, "CUDA")
ops = torch.ops.neuron_cpu_kernel_test
torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::scaled_cumsum")
torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::rotate_")
torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::positives", data_dependent=True)
torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::arange_into")


@pytest.fixture
def strict():
    torch_neuronx.set_strict_fallback(True)
    yield
    torch_neuronx.set_strict_fallback(False)


def test_a_functional_operator_runs_its_cpu_kernel_on_the_device(device, strict):
    x = torch.randn(7, 5)
    for _ in range(3):  # the first launch learns the output layout; later ones are queued
        out = ops.scaled_cumsum(x.to(device), 0.5)
        assert out.device.type == "neuron"
        torch.testing.assert_close(out.cpu(), ops.scaled_cumsum(x, 0.5), rtol=0, atol=0)  # the same CPU kernel
    assert torch_neuronx.get_fallback_ops() == {}
    assert "neuron_cpu_kernel_test::scaled_cumsum" in torch_neuronx.get_executed_ops()


def test_an_operator_writing_into_a_strided_view_changes_only_that_view(device, strict):
    base = torch.randn(6, 12)
    positions = torch.arange(6.0)
    on_device = base.to(device)
    ops.rotate_(on_device[:, 4:8], positions.to(device))
    ops.rotate_(base[:, 4:8], positions)
    torch.testing.assert_close(on_device.cpu(), base, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_a_written_argument_the_kernel_resizes_takes_its_new_size(device, strict):
    """Another package's kernel writes its arguments in place (no copy of a big cache per new
    signature); one that resizes what it writes still leaves the CPU's result."""
    for n in (3, 40, 40):
        out, expected = torch.zeros(5, device=device), torch.zeros(5)
        ops.arange_into(out, n)
        ops.arange_into(expected, n)
        assert out.shape == expected.shape
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_a_data_dependent_output_shape_runs_synchronously(device, strict):
    x = torch.randn(50)
    out = ops.positives(x.to(device))
    torch.testing.assert_close(out.cpu(), ops.positives(x), rtol=0, atol=0)
    assert torch_neuronx.get_fallback_ops() == {}


def test_registering_again_is_harmless_and_an_operator_without_a_cpu_kernel_is_refused(device):
    torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::scaled_cumsum")
    with pytest.raises(RuntimeError, match="only_cuda has no CPU kernel"):
        torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::only_cuda")
    with pytest.raises(RuntimeError, match="not_defined"):
        torch_neuronx.register_cpu_kernel("neuron_cpu_kernel_test::not_defined")
    x = torch.randn(3)
    torch.testing.assert_close(ops.scaled_cumsum(x.to(device), 2.0).cpu(), ops.scaled_cumsum(x, 2.0))


def test_mixing_a_host_tensor_in_is_refused_with_the_device_named(device):
    with pytest.raises(RuntimeError, match="same device.*neuron_cpu_kernel_test::rotate_"):
        ops.rotate_(torch.randn(2, 3, device=device), torch.arange(2.0))
