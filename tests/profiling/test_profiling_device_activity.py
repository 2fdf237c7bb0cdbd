"""Device activity in torch.profiler: measured kernel time per operator, linked to its CPU op."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import torch_neuronx

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def record(fn, **kwargs) -> profile:
    torch.neuron.synchronize()  # kernels queued before the profile would be reported unlinked
    with profile(activities=ACTIVITIES, **kwargs) as prof:
        fn()
        torch.neuron.synchronize()
    return prof


def device_events(prof: profile) -> list:
    return [e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.PrivateUse1]


def cpu_ops(prof: profile) -> dict:
    return {e.correlation_id(): e for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CPU}


def self_device_us(prof: profile, name: str) -> float:
    return sum(e.self_device_time_total for e in prof.key_averages() if e.key == name)


def test_neuron_activity_is_the_privateuse1_alias():
    assert ProfilerActivity.NEURON is ProfilerActivity.PrivateUse1


def test_eager_ops_have_device_time_and_every_kernel_is_linked():
    x = torch.randn(128, 128, device="neuron")
    (x @ x).relu()  # builds both kernels outside the profile
    prof = record(lambda: (x @ x).relu())
    assert self_device_us(prof, "aten::mm") > 0
    assert self_device_us(prof, "aten::relu") > 0
    ops = cpu_ops(prof)
    kernels = device_events(prof)
    assert kernels and all(k.linked_correlation_id() in ops for k in kernels)
    assert {ops[k.linked_correlation_id()].name() for k in kernels} >= {"aten::mm", "aten::relu"}
    table = prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=5)
    assert "aten::mm" in table


def test_kernels_run_on_an_idle_cores_launching_thread_are_profiled_like_queued_ones():
    x = torch.randn(128, 128, device="neuron")
    (x @ x).relu()  # builds both kernels outside the profile
    compiled = torch.compile(lambda t: t * 2, backend="neuron")
    for _ in range(2):  # the second call claims the idle core: eager kernels follow it here
        torch.neuron.synchronize()
        compiled(x)
    before = torch_neuronx.runtime.kernel_counts()["host"]
    prof = record(lambda: (x @ x).relu())
    assert torch_neuronx.runtime.kernel_counts()["host"] - before == 2
    assert self_device_us(prof, "aten::mm") > 0 and self_device_us(prof, "aten::relu") > 0
    ops = cpu_ops(prof)
    kernels = device_events(prof)
    assert {ops[k.linked_correlation_id()].name() for k in kernels} == {"aten::mm", "aten::relu"}
    # The kernels' own CPU calls (relu's clamp_min, the copy into the output) are not recorded as
    # nested operators, as on the worker.
    names = [e.name() for e in ops.values()]
    assert names.count("aten::mm") == names.count("aten::relu") == 1
    assert "aten::clamp_min" not in names and "aten::copy_" not in names


def test_profiling_does_not_change_results():
    torch.manual_seed(0)
    x = torch.randn(64, 32, device="neuron")
    w = torch.randn(32, 16, device="neuron")
    plain = torch.softmax(x @ w, dim=-1).cpu()
    with profile(activities=ACTIVITIES):
        profiled = torch.softmax(x @ w, dim=-1).cpu()
    torch.testing.assert_close(profiled, plain, rtol=0, atol=0)
    torch.testing.assert_close(plain, torch.softmax(x.cpu() @ w.cpu(), dim=-1))


def test_profiled_training_matches_unprofiled_training():
    from torch_neuronx.testing.parity import train
    from torch_neuronx.testing.tiny_gpt import GPTConfig, TinyGPT, make_batches
    config = GPTConfig(n_layer=1, block_size=16)
    batches = make_batches(2, 4, config.block_size, config.vocab_size, seed=0)
    plain_losses, plain_state = train(lambda: TinyGPT(config), batches, "neuron", steps=3)
    with profile(activities=ACTIVITIES) as prof:
        losses, state = train(lambda: TinyGPT(config), batches, "neuron", steps=3)
    assert losses == plain_losses
    for name, tensor in plain_state.items():
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=0)
    assert self_device_us(prof, "aten::addmm") > 0


def test_a_kernels_device_time_is_the_time_it_ran_on_the_core():
    """A kernel that sleeps 30 ms on the core is reported with at least those 30 ms."""
    prof = record(lambda: torch_neuronx._C._launch_python_kernel(0, lambda: time.sleep(0.03), "test sleep", wait=False))
    kernels = [k for k in device_events(prof) if k.name() == "test sleep"]
    assert len(kernels) == 1 and 30e6 <= kernels[0].duration_ns() < 60e9


def test_cpu_fallback_is_timed_on_its_own_lane():
    x = torch.randn(16, device="neuron", dtype=torch.float64)  # float64 computes on the host
    with warnings.catch_warnings():  # the fallback warns once per process
        warnings.simplefilter("ignore")
        torch.exp(x)
    prof = record(lambda: torch.exp(x))
    fallbacks = [k for k in device_events(prof) if k.name() == "cpu fallback: aten::exp"]
    assert fallbacks and all(k.duration_ns() > 0 for k in fallbacks)
    assert cpu_ops(prof)[fallbacks[0].linked_correlation_id()].name() == "aten::exp"
    assert self_device_us(prof, "aten::exp") > 0


def test_compiled_graph_has_device_time():
    def f(a: torch.Tensor) -> torch.Tensor:
        return (a * 2).sin() + 1

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(32, device="neuron")
    compiled(x)
    prof = record(lambda: compiled(x))
    graphs = [k for k in device_events(prof) if k.name().startswith("neuron::compiled_graph_")]
    assert graphs and all(k.duration_ns() > 0 for k in graphs)
    ops = cpu_ops(prof)
    parent = ops[graphs[0].linked_correlation_id()].name()
    assert self_device_us(prof, parent) > 0


def test_kernel_language_op_has_device_time(nki_unary):
    nki_sin = nki_unary("sin")
    x = torch.randn(128, 1, device="neuron")
    nki_sin(x)
    prof = record(lambda: nki_sin(x))
    kernels = [k for k in device_events(prof) if k.name() == "nki:sin_kernel"]
    assert kernels and kernels[0].duration_ns() > 0
    assert cpu_ops(prof)[kernels[0].linked_correlation_id()].name() == "profiling_test::nki_sin"
    assert self_device_us(prof, "profiling_test::nki_sin") > 0


def test_chrome_trace_has_a_lane_per_core_and_stream_and_names_copies(tmp_path):
    x = torch.randn(64, device="neuron")
    side = torch.neuron.Stream()

    def work() -> None:
        x.add(1)
        with torch.neuron.stream(side):
            x.mul(3)
        torch.ones(8).to("neuron")   # host to device
        x.sum().cpu()                 # device to host

    work()
    prof = record(work)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    device = [e for e in trace if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    lanes = {(e["pid"], e["tid"]) for e in device}
    assert (0, 0) in lanes and (0, side.stream_id) in lanes
    names = {e["name"] for e in device}
    assert "aten::_copy_from (host to device)" in names
    assert "aten::_copy_from (device to host)" in names
    assert all(e["args"]["correlation"] > 0 for e in device)
    process_names = {e["args"]["name"] for e in trace if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "neuron:0" in process_names


def test_legacy_profiler_reports_device_time():
    x = torch.randn(128, 128, device="neuron")
    x @ x
    with torch.autograd.profiler.profile(use_kineto=False, use_device="neuron") as prof:
        x @ x
        torch.neuron.synchronize()
    mm = [e for e in prof.function_events if e.name == "aten::mm"]
    assert mm and mm[0].device_time_total > 0


def test_kernel_language_layer_does_not_import_profiling():
    # Layers point downwards: nki keeps its launch reports, torch_neuronx.profiling reads them.
    root = str(Path(torch_neuronx.__file__).resolve().parents[1])
    code = "import sys, nki, nki.device; print('torch_neuronx.profiling' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.stdout.strip() == "False"


def test_kernels_still_queued_when_the_profile_ends_are_reported(nki_unary):
    nki_cos = nki_unary("cos")
    x = torch.randn(128, 128, device="neuron")
    v = torch.randn(128, 1, device="neuron")
    x @ x, nki_cos(v)
    torch.neuron.synchronize()
    with profile(activities=ACTIVITIES) as prof:  # no synchronize before the end
        for _ in range(10):
            x @ x
        nki_cos(v)  # a Python kernel: stopping waits for it without holding the GIL
    names = [k.name() for k in device_events(prof)]
    assert names.count("aten::mm") == 10 and "nki:cos_kernel" in names
