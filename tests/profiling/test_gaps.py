"""Idle gaps of a simulated core and what each waited for (measured on the simulator)."""
from __future__ import annotations

import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.profiling import NeuronConfig, ProfileMode, gaps


def _edges(tmp_path, fn):
    nc = NeuronConfig(profile_output_dir=tmp_path, modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc) as prof:
        fn()
        torch.neuron.synchronize()
    rows = gaps.system_events(prof.profiler.kineto_results.events())
    return rows, gaps.flows(rows)


def _into(rows, edges, name):
    """The stream-order edge into the first device kernel named ``name``."""
    target = next(r["id"] for r in rows if r["trace_event_source"] == "neuron_hw" and r["name"] == name)
    return next(e for e in edges if e["out_id"] == target and e["dependency_type"] == "stream order")


def test_each_gap_says_what_the_core_waited_for(tmp_path):
    x = torch.randn(128, 128, device="neuron")
    big = torch.randn(1024, 1024, device="neuron")
    xd = x.double()

    def step():
        (big @ big).relu()              # relu is queued while the (long) mm runs
        x.sum().item()                  # the host blocks on the value...
        time.sleep(0.004)               # ...then runs Python before launching more
        x.add(1)
        time.sleep(0.003)               # no sync: the host is simply late
        x.mul(2)
        torch.exp(xd)                   # float64: a CPU fallback, computed by the host...
        x.sub(1)                        # ...before this is launched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step()
        torch.neuron.synchronize()  # the warm-up's kernels end before the profile starts
        rows, edges = _edges(tmp_path, step)
    assert _into(rows, edges, "aten::relu")["waited_for"] == gaps.QUEUE
    after_item = _into(rows, edges, "aten::add.Tensor")
    assert after_item["waited_for"] == gaps.HOST_SYNC and after_item["gap_time"] >= 4e6
    late = _into(rows, edges, "aten::mul.Tensor")
    # The sleep minus the add kernel's own time: the host launched mul about 3 ms after add.
    assert late["waited_for"] == gaps.HOST_LAUNCH and late["gap_time"] >= 2.5e6
    assert _into(rows, edges, "aten::sub.Tensor")["waited_for"] == gaps.CPU_FALLBACK
    # Every launched kernel has its launch edge, and the idle time adds up by cause.
    launched = {e["out_id"] for e in edges if e["dependency_type"] == "launch"}
    assert {r["id"] for r in rows if r["name"] in ("aten::add.Tensor", "aten::mul.Tensor")} <= launched
    idle = gaps.idle_by_cause(edges)
    assert idle[gaps.HOST_SYNC] >= 4e6 and idle[gaps.HOST_LAUNCH] >= 2.5e6
    assert sum(idle.values()) == sum(e["gap_time"] for e in edges if e["dependency_type"] == "stream order")
    assert all(r["end_ts"] - r["start_ts"] == r["duration_ns"] for r in rows)


def test_data_edges_link_a_kernel_to_the_last_writer_of_what_it_reads(tmp_path):
    from torch_neuronx import _C
    x = torch.randn(64, 64, device="neuron")

    def step():
        a = x.add(1)
        x.mul(3)            # reads x only: no edge from add
        a.mul_(2)           # reads and rewrites a: from add
        a.sub(5)            # reads a: from the in-place mul, its last writer
    # A signature's first call describes its host results, not the device outputs they are copied
    # into (docs/profiling.md): the profiled calls are planned launches, as in a training loop.
    step()
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=tmp_path)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc) as prof:
        step()
        torch.neuron.synchronize()
    events = prof.profiler.kineto_results.events()
    rows = gaps.system_events(events)
    row_of = {id(e): i for i, e in enumerate(gaps.in_order(events))}
    import json
    described = {row_of[id(e)]: json.loads(a) for e in events
                 if (a := _C._profiler_kernel_args().get((e.device_index(), e.start_ns()))) is not None
                 and e.device_type() != torch.autograd.DeviceType.CPU}
    edges = [e for e in gaps.flows(rows, described) if e["dependency_type"] == "data"]
    kernel = {r["name"]: r["id"] for r in rows if r["trace_event_source"] == "neuron_hw"}
    pairs = {(rows[e["in_id"]]["name"], rows[e["out_id"]]["name"]) for e in edges}
    assert ("aten::add.Tensor", "aten::mul_.Tensor") in pairs
    assert ("aten::mul_.Tensor", "aten::sub.Tensor") in pairs
    assert not any(p[1] == "aten::mul.Tensor" for p in pairs)  # x was written before the profile
    assert ("aten::add.Tensor", "aten::sub.Tensor") not in pairs  # the in-place mul wrote a since
    assert all(e["gap_time"] == max(0, rows[e["out_id"]]["start_ts"] - rows[e["in_id"]]["end_ts"]) for e in edges)
    assert set(kernel) >= {"aten::add.Tensor", "aten::mul.Tensor", "aten::mul_.Tensor", "aten::sub.Tensor"}
