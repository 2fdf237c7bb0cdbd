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
