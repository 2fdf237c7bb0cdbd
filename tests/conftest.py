"""Shared fixtures of the TorchNeuron test suite."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helpers  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _neff_cache_in_a_temp_dir(tmp_path_factory):
    """Compiled executables go to a per-session directory, not the user's cache, unless
    TORCH_NEURONX_NEFF_CACHE_DIR is set (subprocesses inherit the variable)."""
    if os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR"):
        yield
        return
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("neff_cache"))
    yield
    del os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"]


@pytest.fixture
def device():
    """The neuron device name."""
    return helpers.DEVICE


@pytest.fixture
def assert_same():
    """helpers.assert_same(cpu_result, device_result, atol=None, rtol=None, check_stride=True)."""
    return helpers.assert_same


@pytest.fixture(autouse=True)
def _neuron_op_tracking_and_sync():
    """Clear op tracking before each test; drain the device queues after it."""
    import torch_neuronx
    torch_neuronx.clear_op_tracking()
    yield
    for index in range(torch.neuron.device_count()):
        torch.neuron.synchronize(index)
