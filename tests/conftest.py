"""Shared fixtures of the TorchNeuron test suite."""
import os
import sys

import pytest
import torch

import torch_neuronx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helpers  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _compile_caches_in_a_temp_dir(tmp_path_factory):
    """Compiled executables and Inductor's caches go to per-session directories, not the
    user's, unless TORCH_NEURONX_NEFF_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR are set
    (subprocesses inherit the variables)."""
    unset = [name for name in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
             if not os.environ.get(name)]
    for name in unset:
        os.environ[name] = str(tmp_path_factory.mktemp(name.lower()))
    yield
    for name in unset:
        del os.environ[name]


def pytest_addoption(parser):
    parser.addoption("--reverse", action="store_true",
                     help="run the collected tests in reverse order (tools/check_test_isolation.py: "
                          "no test may depend on what an earlier one left behind)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--reverse"):
        items.reverse()


def _global_state() -> dict:
    """What a test may change only through a scoped API, and must leave as it found it."""
    import torch._dynamo.config
    import torch._inductor.config
    return {
        # pytest's own variable, and those Inductor sets once per process on its first compile.
        "environment": {k: v for k, v in os.environ.items()
                        if k != "PYTEST_CURRENT_TEST" and not k.startswith("_TORCHINDUCTOR_")},
        "default dtype": torch.get_default_dtype(),
        "default device": torch.get_default_device(),
        "grad mode": torch.is_grad_enabled(),
        "torch._dynamo.config": torch._dynamo.config.get_config_copy(),
        "torch._inductor.config": torch._inductor.config.get_config_copy(),
        "torch.compiler default backend": torch.compiler.get_default_backend(),
        "eager mode": torch_neuronx.get_eager_mode(),
    }


@pytest.fixture(autouse=True)
def _no_leaked_global_state():
    """Each test gets the CPU and neuron RNG back as they were, and fails if it leaves torch's
    configuration, the environment, the default dtype/device, the grad mode or the eager mode changed."""
    before = _global_state()
    cpu_rng = torch.random.get_rng_state()
    neuron_rng = torch.neuron.get_rng_state_all() if torch.neuron.is_initialized() else None
    yield
    torch.random.set_rng_state(cpu_rng)
    if neuron_rng is not None:
        torch.neuron.set_rng_state_all(neuron_rng)
    after = _global_state()
    changed = []
    for name, value in before.items():
        if isinstance(value, dict):
            changed += [f"{name}[{k!r}]" for k in value.keys() | after[name].keys()
                        if value.get(k, "<unset>") != after[name].get(k, "<unset>")]
        elif after[name] != value:
            changed.append(name)
    assert not changed, f"the test left global state changed: {', '.join(sorted(changed))}"


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
    torch_neuronx.clear_op_tracking()
    yield
    for index in range(torch.neuron.device_count()):
        torch.neuron.synchronize(index)
