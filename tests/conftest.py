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


# Tests of another chip generation (@pytest.mark.generation("trn3")). The generation is a
# process's setting (TORCH_NEURONX_SIM_CONF), so a test marked for another one than this process
# simulates runs in a child pytest process that simulates it: one child per module and
# generation, for all of that module's tests so marked, whose outcomes the child writes to a
# file (_REPORT) and each test then reports as its own.
_REPORT = "TORCH_NEURONX_TEST_OUTCOMES"
_generation_runs: dict[tuple[str, str], dict[str, list[str]]] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "generation(name): run in a process simulating that chip generation")


def _marked_generation(item) -> str | None:
    marker = item.get_closest_marker("generation")
    return marker.args[0] if marker else None


def _run_in_generation(item, generation: str) -> dict[str, list[str]]:
    key = (str(item.path), generation)
    if key not in _generation_runs:
        import json
        import subprocess
        import tempfile
        nodeids = [i.nodeid for i in item.session.items
                   if str(i.path) == key[0] and _marked_generation(i) == generation]
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "outcomes.json")
            conf = [kv for kv in os.environ.get("TORCH_NEURONX_SIM_CONF", "").split(",")
                    if kv and not kv.lower().startswith("generation:")]
            env = {**os.environ, _REPORT: report,
                   "TORCH_NEURONX_SIM_CONF": ",".join([f"generation:{generation}", *conf])}
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodeids],
                                 cwd=str(item.config.rootpath), env=env, capture_output=True, text=True)
            outcomes = json.load(open(report)) if os.path.exists(report) else {}
        if not outcomes:
            raise RuntimeError(f"the {generation} test process reported nothing:\n{run.stdout}\n{run.stderr}")
        _generation_runs[key] = outcomes
    return _generation_runs[key]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    generation = _marked_generation(pyfuncitem)
    if generation is None or generation == torch_neuronx.runtime.current_topology().generation:
        return None
    outcome, text = _run_in_generation(pyfuncitem, generation).get(pyfuncitem.nodeid, ["missing", "not run"])
    if outcome == "skipped":
        pytest.skip(text)
    if outcome != "passed":
        pytest.fail(f"in a process simulating {generation}:\n{text}", pytrace=False)
    return True


_outcomes: dict[str, list[str]] = {}


def pytest_runtest_logreport(report):
    if os.environ.get(_REPORT) and (report.when == "call" or report.outcome != "passed"):
        text = report.longreprtext if report.outcome != "passed" else ""
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            text = report.longrepr[2]
        _outcomes.setdefault(report.nodeid, [report.outcome, text])
        if report.outcome != "passed":
            _outcomes[report.nodeid] = [report.outcome, text]


def pytest_sessionfinish(session):
    if os.environ.get(_REPORT):
        import json
        with open(os.environ[_REPORT], "w") as f:
            json.dump(_outcomes, f)


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
