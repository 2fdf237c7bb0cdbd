"""Topology of the simulated NeuronCores: environment parsing and what a process sees.

The environment is read when torch_neuronx is imported, so configurations other than the
default run in a fresh interpreter. The parser itself is also tested in-process.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from torch_neuronx.runtime import current_topology, topology as topo_mod
from torch_neuronx.runtime.topology import from_env, parse_core_list

GiB = 1 << 30
_OUR_VARS = ("NEURON_", "TORCH_NEURONX_", "TORCH_DEVICE_BACKEND_AUTOLOAD")


def _clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OUR_VARS)}
    env.update(overrides)
    return env


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_clean_env(**env),
                          capture_output=True, text=True, timeout=180)


_REPORT = """
import json, sys
import torch
n = torch.neuron.device_count()
props = [torch.neuron.get_device_properties(i) for i in range(n)]
# every visible device is usable and has its own pool
vals = []
for i in range(n):
    t = torch.arange(4).to(f"neuron:{i}") * (i + 1)
    vals.append(t.cpu().tolist())
print(json.dumps({
    "count": n,
    "accel_count": torch.accelerator.device_count(),
    "total": [p.total_memory for p in props],
    "mem_info_total": [torch.neuron.mem_get_info(i)[1] for i in range(n)],
    "core": [p.core_index for p in props],
    "chip": [p.chip_index for p in props],
    "lnc": [p.logical_nc_config for p in props],
    "gen": [p.chip_generation for p in props],
    "name": torch.neuron.get_device_name(0),
    "capability": list(torch.neuron.get_device_capability(0)),
    "vals": vals,
    "autoloaded": "torch_neuronx" in sys.modules,
}))
"""

# (id, environment, expected device count, expected bytes per core, expected core indices)
_CONFIGS = [
    ("default", {}, 4, 24 * GiB, [0, 1, 2, 3]),
    ("lnc1", {"NEURON_LOGICAL_NC_CONFIG": "1"}, 8, 12 * GiB, list(range(8))),
    ("two_chips", {"TORCH_NEURONX_SIM_CONF": "chips:2"}, 8, 24 * GiB, list(range(8))),
    ("trn3", {"TORCH_NEURONX_SIM_CONF": "generation:trn3"}, 4, 36 * GiB, [0, 1, 2, 3]),
    ("visible_2", {"NEURON_RT_VISIBLE_CORES": "2"}, 1, 24 * GiB, [2]),
    ("visible_1_3", {"NEURON_RT_VISIBLE_CORES": "1-3"}, 3, 24 * GiB, [1, 2, 3]),
    # (also: the capacity override used for out-of-memory tests)
    ("num_cores_2", {"NEURON_RT_NUM_CORES": "2", "TORCH_NEURONX_SIM_CONF": f"hbm_bytes:{1 << 26}"},
     2, 1 << 26, [0, 1]),
]


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    def one(cfg):
        name, env, *_ = cfg
        proc = run_py(_REPORT, **env)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
        return name, json.loads(proc.stdout.strip().splitlines()[-1])
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, _CONFIGS))


@pytest.mark.parametrize("name,env,count,per_core,cores", _CONFIGS, ids=[c[0] for c in _CONFIGS])
def test_topology_from_environment(reports, name, env, count, per_core, cores):
    r = reports[name]
    assert r["count"] == count
    assert r["accel_count"] == count
    assert r["total"] == [per_core] * count
    assert r["mem_info_total"] == [per_core] * count
    assert r["core"] == cores
    assert r["vals"] == [[0 * (i + 1), 1 * (i + 1), 2 * (i + 1), 3 * (i + 1)] for i in range(count)]
    # plain `import torch` (no torch_neuronx import) autoloads the backend
    assert r["autoloaded"], "import torch must autoload torch_neuronx"


def test_topology_details(reports):
    d = reports["default"]
    assert d["lnc"] == [2] * 4 and d["gen"] == ["trn2"] * 4
    assert d["name"] == "NeuronCore (simulated trn2, LNC=2)"
    assert d["capability"] == [2, 0]
    assert reports["lnc1"]["lnc"] == [1] * 8
    assert reports["lnc1"]["name"] == "NeuronCore (simulated trn2, LNC=1)"
    # two chips of 4 logical cores each
    assert reports["two_chips"]["chip"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert reports["trn3"]["gen"] == ["trn3"] * 4 and reports["trn3"]["capability"] == [3, 0]
    # a 96 GiB trn2 chip and a 144 GiB trn3 chip are fully divided among their logical cores
    assert sum(d["total"]) == 96 * GiB
    assert sum(reports["trn3"]["total"]) == 144 * GiB
    assert sum(reports["lnc1"]["total"]) == 96 * GiB


_INVALID = [  # (environment, how the warning names the setting)
    ({"NEURON_LOGICAL_NC_CONFIG": "3"}, "NEURON_LOGICAL_NC_CONFIG="),
    ({"NEURON_RT_VISIBLE_CORES": "7"}, "NEURON_RT_VISIBLE_CORES="),
    ({"NEURON_RT_NUM_CORES": "9"}, "NEURON_RT_NUM_CORES="),
    ({"TORCH_NEURONX_SIM_CONF": "generation:trn9"}, "TORCH_NEURONX_SIM_CONF: generation:trn9"),
]


def test_invalid_values_warn_naming_the_variable_and_leave_the_device_unavailable():
    """``import torch`` auto-loads the backend: a bad setting must not break programs that do not
    use the device, nor silently run on other cores than the user asked for."""
    code = """
    import torch
    x = torch.ones(2, requires_grad=True); (x * 2).sum().backward()
    print('IMPORTED', torch.neuron.device_count(), torch.neuron.is_available(), x.grad.tolist())
    try:
        torch.ones(1, device="neuron")
    except IndexError as e:  # as for any index beyond device_count()
        print('REFUSED', '0 visible' in str(e))
    """

    def one(case):
        env, var = case
        return env, var, run_py(code, **env)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, _INVALID))
    for env, var, proc in results:
        assert proc.returncode == 0, f"{env}: {proc.stderr[-2000:]}"
        assert "IMPORTED 0 False [2.0, 2.0]" in proc.stdout, proc.stdout
        assert "REFUSED True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
        assert f"RuntimeWarning: torch_neuronx: {var}" in proc.stderr and "unavailable" in proc.stderr, proc.stderr


def test_a_malformed_flag_warns_naming_it_and_keeps_the_default():
    proc = run_py("import torch, torch_neuronx; print(torch.ones(2, device='neuron').double().sum().item())",
                  TORCH_NEURONX_STRICT_FALLBACK="maybe")
    assert proc.returncode == 0, proc.stderr  # strict mode stays off: the float64 sum falls back
    assert proc.stdout.split()[-1] == "2.0"
    assert "TORCH_NEURONX_STRICT_FALLBACK='maybe' is not a boolean" in proc.stderr


def test_autoload_disabled_then_explicit_import():
    code = """
    import sys, torch
    assert "torch_neuronx" not in sys.modules
    try:
        torch.ones(1).to("neuron")
    except RuntimeError as e:
        print("FAILED_WITHOUT_IMPORT", "neuron" in str(e))
    else:
        print("UNEXPECTED_SUCCESS")
    import torch_neuronx
    t = torch.ones(3).to("neuron") * 2
    print("AFTER_IMPORT", t.device, t.cpu().tolist())
    """
    proc = run_py(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAILED_WITHOUT_IMPORT True" in proc.stdout
    assert "AFTER_IMPORT neuron:0 [2.0, 2.0, 2.0]" in proc.stdout


# ---------------------------------------------------------------- in-process parser tests

def test_from_env_defaults():
    t = from_env({})
    assert t.generation == "trn2" and t.logical_nc_config == 2 and t.num_chips == 1
    assert t.visible_cores == (0, 1, 2, 3)
    assert t.hbm_bytes_per_core == 24 * GiB
    assert t.cores_per_chip == 4
    assert not t.launch_blocking and not t.capture_stack


@pytest.mark.parametrize("env,cores,hbm", [
    ({"NEURON_LOGICAL_NC_CONFIG": "1"}, tuple(range(8)), 12 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": "chips:2"}, tuple(range(8)), 24 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": "chips:2", "NEURON_LOGICAL_NC_CONFIG": "1"}, tuple(range(16)), 12 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": "generation:trn3"}, (0, 1, 2, 3), 36 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": " generation: TRN3 "}, (0, 1, 2, 3), 36 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": "generation:trn3", "NEURON_LOGICAL_NC_CONFIG": "1"}, tuple(range(8)), 18 * GiB),
    ({"NEURON_RT_VISIBLE_CORES": "2"}, (2,), 24 * GiB),
    ({"NEURON_RT_VISIBLE_CORES": "1-3"}, (1, 2, 3), 24 * GiB),
    ({"NEURON_RT_VISIBLE_CORES": "0,2-3"}, (0, 2, 3), 24 * GiB),
    ({"NEURON_RT_VISIBLE_CORES": "1-3", "NEURON_RT_NUM_CORES": "2"}, (1, 2), 24 * GiB),
    ({"NEURON_RT_NUM_CORES": "2"}, (0, 1), 24 * GiB),
    ({"NEURON_RT_NUM_CORES": "0"}, (0, 1, 2, 3), 24 * GiB),
    ({"NEURON_RT_VISIBLE_CORES": ""}, (0, 1, 2, 3), 24 * GiB),
    ({"TORCH_NEURONX_SIM_CONF": "hbm_bytes:1048576"}, (0, 1, 2, 3), 1 << 20),
    ({"TORCH_NEURONX_SIM_CONF": "chips:2", "NEURON_RT_VISIBLE_CORES": "6-7"}, (6, 7), 24 * GiB),
])
def test_from_env_configurations(env, cores, hbm):
    t = from_env(env)
    assert t.visible_cores == cores
    assert t.hbm_bytes_per_core == hbm


def test_from_env_flags():
    t = from_env({"NEURON_LAUNCH_BLOCKING": "1", "TORCH_NEURONX_ENABLE_STACK_TRACE": "true"})
    assert t.launch_blocking and t.capture_stack
    t = from_env({"NEURON_LAUNCH_BLOCKING": "0", "TORCH_NEURONX_ENABLE_STACK_TRACE": "no"})
    assert not t.launch_blocking and not t.capture_stack


def test_from_env_queue_depth():
    assert from_env({}).max_inflight == 256
    assert from_env({"TORCH_NEURONX_SIM_CONF": "max_inflight_kernels:8"}).max_inflight == 8


def test_trn1_chips_have_two_neuroncore_v2_cores_of_16_gib():
    """Trainium1: two NeuronCore-v2 per chip sharing 32 GiB, one core per device index (no
    logical grouping: LNC begins with Trainium2)."""
    topology = from_env({"TORCH_NEURONX_SIM_CONF": "generation:trn1,chips:2"})
    assert (topology.generation, topology.logical_nc_config) == ("trn1", 1)
    assert topology.visible_cores == (0, 1, 2, 3)
    assert topology.hbm_bytes_per_core == 16 * GiB


def test_from_env_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "3")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    assert from_env().visible_cores == (3,)


@pytest.mark.parametrize("env,var", [
    ({"NEURON_LOGICAL_NC_CONFIG": "4"}, "NEURON_LOGICAL_NC_CONFIG"),
    ({"NEURON_LOGICAL_NC_CONFIG": "x"}, "NEURON_LOGICAL_NC_CONFIG"),
    ({"TORCH_NEURONX_SIM_CONF": "generation:inf2"}, "TORCH_NEURONX_SIM_CONF: generation:inf2"),
    ({"TORCH_NEURONX_SIM_CONF": "generation:trn1", "NEURON_LOGICAL_NC_CONFIG": "2"}, "1 on trn1"),
    ({"TORCH_NEURONX_SIM_CONF": "chips:-1"}, "TORCH_NEURONX_SIM_CONF: chips:-1"),
    ({"NEURON_RT_NUM_CORES": "5"}, "NEURON_RT_NUM_CORES"),
    ({"NEURON_RT_NUM_CORES": "-1"}, "NEURON_RT_NUM_CORES"),
    ({"NEURON_RT_VISIBLE_CORES": "2", "NEURON_RT_NUM_CORES": "2"}, "NEURON_RT_NUM_CORES"),
    ({"NEURON_RT_VISIBLE_CORES": "4"}, "NEURON_RT_VISIBLE_CORES"),
    ({"NEURON_RT_VISIBLE_CORES": "0-7", "NEURON_LOGICAL_NC_CONFIG": "2"}, "NEURON_RT_VISIBLE_CORES"),
    ({"TORCH_NEURONX_SIM_CONF": "hbm_bytes:lots"}, "TORCH_NEURONX_SIM_CONF hbm_bytes='lots' is not an integer"),
    ({"TORCH_NEURONX_SIM_CONF": "max_inflight_kernels:0"}, "max_inflight_kernels:0: expected at least 1"),
    ({"TORCH_NEURONX_SIM_CONF": "inline_kernels:maybe"}, "inline_kernels:maybe is not a boolean"),
    ({"TORCH_NEURONX_SIM_CONF": "chip:2"}, "'chip:2' is not key:value with a key of"),
    ({"TORCH_NEURONX_SIM_CONF": "chips"}, "'chips' is not key:value"),
    ({"TORCH_NEURONX_SIM_CHIPS": "2"},
     "TORCH_NEURONX_SIM_CHIPS is no longer read: set TORCH_NEURONX_SIM_CONF=chips:2 instead"),
])
def test_from_env_invalid(env, var):
    with pytest.raises(ValueError, match=re.escape(var)):
        from_env(env)


def test_sim_conf_settings_and_faults():
    """One variable for the simulator's settings (as PYTORCH_CUDA_ALLOC_CONF): keys are
    case-insensitive, spaces around items ignored, inject_fault repeatable with an optional count
    (operator names contain colons)."""
    t = from_env({"TORCH_NEURONX_SIM_CONF": "Inline_Kernels:off, autograd_device_threads:1,"
                                            "inject_fault:aten::mul.Tensor:3,inject_fault:aten::add.Tensor"})
    assert (t.inline_kernels, t.autograd_device_threads) == (False, True)
    assert t.faults == (("aten::mul.Tensor", 3), ("aten::add.Tensor", 1))
    d = from_env({})
    assert (d.inline_kernels, d.autograd_device_threads, d.faults) == (True, False, ())


def test_parse_core_list():
    assert parse_core_list("0-3", 4) == (0, 1, 2, 3)
    assert parse_core_list("2", 4) == (2,)
    assert parse_core_list("0, 2-3", 4) == (0, 2, 3)
    assert parse_core_list("3,1", 4) == (3, 1)
    assert parse_core_list("5-7", 8) == (5, 6, 7)
    for bad in ("3-1", "x", "-1", "0-4", "1,1", "0-2,2", "1-"):
        with pytest.raises(ValueError, match="NEURON_RT_VISIBLE_CORES"):
            parse_core_list(bad, 4)


def test_chip_specs():
    assert topo_mod.CHIPS["trn2"].hbm_bytes == 96 * GiB
    assert topo_mod.CHIPS["trn3"].hbm_bytes == 144 * GiB
    assert topo_mod.CHIPS["trn2"].physical_cores == 8


def test_current_process_topology_matches_device_module():
    topo = torch_neuronx_topology()
    assert torch.neuron.device_count() == len(topo.visible_cores)
    for i in range(torch.neuron.device_count()):
        assert torch.neuron.get_device_properties(i).total_memory == topo.hbm_bytes_per_core
        assert torch.neuron.get_device_properties(f"neuron:{i}").core_index == topo.visible_cores[i]


def torch_neuronx_topology():
    import torch_neuronx.runtime as rt
    return rt.current_topology()


def test_importing_torch_with_the_backend_starts_no_thread_or_process_and_keeps_autograd():
    """The backend auto-loads on every ``import torch``: programs that never use the device
    must see PyTorch as it is without it."""
    code = """
    import os, torch
    children = [p for p in os.listdir('/proc') if p.isdigit()
                and open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1] == str(os.getpid())]
    threads = len(os.listdir('/proc/self/task'))
    # (The first backward starts autograd's thread per device of every registered device type,
    # as PyTorch does for CUDA devices: not counted, it is the engine's.)
    x = torch.ones(2, requires_grad=True); (x * 2).sum().backward()
    print(threads, len(children), torch.autograd.is_multithreading_enabled(),
          'torch_neuronx' in __import__('sys').modules)
    """
    without = run_py(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    loaded = run_py(code)
    assert without.returncode == 0 and loaded.returncode == 0, without.stderr + loaded.stderr
    threads, children, multithreading, imported = loaded.stdout.split()
    assert imported == "True" and multithreading == "True" and children == "0"
    assert threads == without.stdout.split()[0]


@pytest.mark.generation("trn3")
def test_a_test_marked_for_another_generation_runs_in_a_process_simulating_it():
    # tests/conftest.py runs it in a child pytest process with TORCH_NEURONX_SIM_CONF=generation:trn3.
    assert current_topology().generation == "trn3"
    assert current_topology().hbm_bytes_per_core == 36 * GiB  # a trn3 logical core's
