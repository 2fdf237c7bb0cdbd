"""NeuronConfig / NeuronProfiler: the documented profiling example (docs/profiling.md), the output
layout and the Parquet tables."""
from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode, explorer_schema
from torch_neuronx.profiling.analysis import SCHEMAS
from torch_neuronx.runtime import chips


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_spec_profiler_example_runs_unchanged(tmp_path, capsys):
    out_dir = str(tmp_path)
    x = torch.randn(64, 256, device="neuron")
    # --- the example of docs/profiling.md, verbatim ---
    from torch.profiler import ProfilerActivity, profile

    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
    nc = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out_dir,
                      capture_enabled_for_nc="0", correlate_device_time=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=nc, on_trace_ready=NeuronProfiler(nc).export_trace,
                 schedule=torch.profiler.schedule(wait=2, warmup=1, active=1)) as prof:
        for _ in range(4):
            with torch.no_grad():
                rms_norm(x)
            torch.neuron.synchronize()
            prof.step()
    print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=4))
    # --- end of the example ---
    table = capsys.readouterr().out
    assert "Self NEURON" in table
    device_ops = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    assert {e.key for e in device_ops} >= {"aten::mul", "aten::rsqrt"}
    [run] = (tmp_path / f"{socket.gethostname()}_pid_{os.getpid()}").iterdir()
    assert {p.name for p in run.iterdir()} >= {"framework_trace.json", *(f"{n}.parquet" for n in SCHEMAS)}


def export(tmp_path: Path, fn, **kwargs) -> tuple[dict, profile]:
    nc = NeuronConfig(profile_output_dir=tmp_path, **kwargs)
    exporter = NeuronProfiler(nc)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=exporter.export_trace, with_stack=True) as prof:
        fn()
        torch.neuron.synchronize()
    out = exporter.last_output_dir
    return {name: pq.read_table(out / f"{name}.parquet") for name in SCHEMAS}, prof


def trace_events(tmp_path: Path) -> list[dict]:
    [trace] = tmp_path.rglob("framework_trace.json")
    return json.loads(trace.read_text())["traceEvents"]


def test_every_mode_records_its_data(tmp_path):
    a = torch.randn(256, 256, device="neuron")
    a @ a

    def work():
        for _ in range(20):  # a few sampling intervals long
            a @ a
    tables, _ = export(tmp_path, work, modes=list(ProfileMode))
    runtime = {r["name"]: r for r in tables["RuntimeApi"].to_pylist()}
    assert runtime["neuronLaunchKernel"]["calls"] >= 20 and runtime["neuronDeviceSynchronize"]["calls"] >= 1
    cpu = tables["CpuUtilization"].to_pylist()
    assert cpu and all(r["interval_us"] > 0 and 0 <= r["system_cpu_percent"] <= 100 for r in cpu)
    assert all(r["process_cpu_percent"] >= 0 for r in cpu)
    memory = tables["HostMemory"].to_pylist()
    assert len(memory) >= 2 and all(r["host_rss_bytes"] > 0 for r in memory)
    assert all(r["device_allocated_bytes"] >= 256 * 256 * 4 for r in memory)
    assert memory[0]["device_allocated_bytes"] == sum(memory[0]["device_allocated_bytes_per_core"])
    events = trace_events(tmp_path)
    launches = [e for e in events if e.get("name") == "neuronLaunchKernel"]
    assert launches and all(e["pid"] == os.getpid() for e in launches)
    # Each launch's flow arrow ends on a device kernel.
    starts = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"}
    assert len(starts) >= 20 and starts == ends
    counters = {e["name"] for e in events if e.get("ph") == "C"}
    assert counters == {"CPU utilisation (%)", "Memory (bytes)"}
    assert tables["Metadata"].to_pylist()[0]["modes"] == "device,runtime,cpu_util,host_memory"


def test_modes_not_requested_record_nothing(tmp_path):
    a = torch.randn(64, device="neuron")
    a + 1
    tables, prof = export(tmp_path, lambda: a + 1, modes=[ProfileMode.DEVICE])
    assert tables["RuntimeApi"].num_rows == tables["CpuUtilization"].num_rows == tables["HostMemory"].num_rows == 0
    events = trace_events(tmp_path)
    assert not [e for e in events if e.get("cat") in ("privateuse1_runtime", "ac2g") or e.get("ph") == "C"]
    assert [e for e in events if e.get("cat") == "kernel"]
    _, prof = export(tmp_path / "runtime_only", lambda: a + 1, modes=[ProfileMode.RUNTIME])
    events = prof.profiler.kineto_results.events()
    assert "kernel" not in {e.activity_type() for e in events}
    assert "neuronLaunchKernel" in {e.name() for e in events if e.activity_type() == "privateuse1_runtime"}


def test_tables_have_the_documented_columns_and_estimates(tmp_path):
    a = torch.randn(256, 256, device="neuron", dtype=torch.bfloat16)
    a @ a
    tables, _ = export(tmp_path, lambda: (a @ a).relu())
    for name, schema in SCHEMAS.items():
        assert tables[name].schema.equals(schema), name
    ops = {r["op_name"]: r for r in tables["FrameworkOp"].to_pylist()}
    mm = ops["aten::mm"]
    assert mm["execution"] == "native" and mm["device_time_us"] > 0
    assert mm["estimated_engine"] == "TensorE" and mm["estimated_flops"] == 2 * 256**3
    assert ops["aten::relu"]["estimated_engine"] == "VectorE"
    assert mm["source_location"] and "test_profiling_exporter.py" in mm["source_location"]
    [meta] = tables["Metadata"].to_pylist()
    assert meta["is_simulation"] is True and meta["chip_generation"] == "trn2"
    # The estimates are for the logical core the runtime simulates (its default grouping: 2).
    assert meta["logical_nc_config"] == 2
    assert meta["tensor_flops_bf16_per_core"] == 2 * chips.TRN2.tensor_flops[chips.BF16]
    [summary] = tables["Summary"].to_pylist()
    assert summary["device_time_us"] > 0 and summary["total_time"] > 0  # seconds, as Explorer's
    assert 0 < summary["mfu_estimated_percent"] <= 100
    assert summary["tensor_engine_active_time"] > 0
    assert summary["tensor_engine_active_time_percent"] == pytest.approx(
        100 * summary["tensor_engine_active_time"] / summary["total_time"])


def test_fallback_is_charged_host_time_plus_transfer(tmp_path):
    x = torch.randn(1024, device="neuron", dtype=torch.float64)
    with warnings.catch_warnings():  # the fallback warns once per process
        warnings.simplefilter("ignore")
        torch.exp(x)
    tables, _ = export(tmp_path, lambda: torch.exp(x))
    exp = next(r for r in tables["FrameworkOp"].to_pylist() if r["op_name"] == "aten::exp")
    assert exp["is_fallback"] and exp["host_fallback_time_us"] > 0
    assert exp["estimated_chip_time_us"] > exp["host_fallback_time_us"]
    assert tables["Summary"].to_pylist()[0]["fallback_ops"] >= 1


def test_kernel_language_instructions_come_from_the_simulator_per_launch(tmp_path, nki_unary):
    nki_cos = nki_unary("cos")
    small, large = torch.randn(64, 1, device="neuron"), torch.randn(128, 1, device="neuron")
    nki_cos(small), nki_cos(large)
    tables, _ = export(tmp_path, lambda: (nki_cos(small), nki_cos(large)))
    instructions = tables["Instruction"].to_pylist()
    assert instructions and {r["kernel_name"] for r in instructions} == {"nki:cos_kernel"}
    assert {r["engine"] for r in instructions} >= {"DMA"}
    assert all("conftest.py" in r["nki_source_location"] for r in instructions)
    # One set of rows per recorded launch, each with that launch's shapes (not the latest run's).
    shapes = {r["launch"]: r["operands"] for r in instructions if r["opcode"] == "load"}
    assert set(shapes) == {0, 1} and "64" in shapes[0] and "128" in shapes[1]
    # Explorer's timeline: each launch's instructions inside its measured device interval, every
    # engine's instructions in issue order, each starting when its engine is free or, later, when
    # the instruction it waited for (the producer of what it reads) ends; durations consistent.
    assert all(r["end_ts"] - r["start_ts"] == r["duration_ns"] >= 0 for r in instructions)
    by_id = {r["id"]: r for r in instructions}
    assert any(r["waited_for"] is not None for r in instructions)  # the cos waits for its load
    for launch in (0, 1):
        rows = [r for r in instructions if r["launch"] == launch]
        for engine in {r["engine"] for r in rows}:
            lane = [r for r in rows if r["engine"] == engine]
            assert [r["pc"] for r in lane] == list(range(len(lane)))
            for before, r in zip([None, *lane], lane):
                free = before["end_ts"] if before else min(x["start_ts"] for x in rows)
                producer = by_id[r["waited_for"]]["end_ts"] if r["waited_for"] is not None else None
                assert r["start_ts"] == (producer if producer is not None else free)
                assert producer is None or producer > free
    op = next(r for r in tables["FrameworkOp"].to_pylist() if r["op_name"] == "profiling_test::nki_cos")
    assert op["execution"] == "kernel-language" and op["estimated_chip_time_us"] > 0
    per_launch = len(instructions) // 2
    opcodes = tables["OpcodeSummary"].to_pylist()
    assert sum(r["instruction_count"] for r in opcodes) == 2 * per_launch
    assert all(0 < r["active_time_ns"] <= r["instruction_time_ns"] and 0 < r["active_time_percent"] <= 100
               for r in opcodes)
    # ActiveTime: merged, disjoint intervals per engine, covering every instruction.
    active = tables["ActiveTime"].to_pylist()
    for engine in {r["engine"] for r in instructions}:
        spans = sorted((r["start_ts"], r["end_ts"]) for r in active if r["engine"] == engine)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        assert all(any(s <= r["start_ts"] and r["end_ts"] <= e for s, e in spans)
                   for r in instructions if r["engine"] == engine)


def test_kernel_language_rows_are_bounded_by_max_events_per_nc(tmp_path, nki_unary):
    nki_cos = nki_unary("cos")
    x = torch.randn(128, 1, device="neuron")
    nki_cos(x)
    tables, _ = export(tmp_path, lambda: [nki_cos(x) for _ in range(4)], max_events_per_nc=2)
    assert {r["launch"] for r in tables["Instruction"].to_pylist()} <= {0, 1}


def test_capture_enabled_for_nc_limits_the_recorded_cores(tmp_path):
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two neuron cores")
    a = torch.randn(32, device="neuron:0")
    b = torch.randn(32, device="neuron:1")
    _, prof = export(tmp_path, lambda: (a + 1, b + 1), capture_enabled_for_nc="1", max_events_per_nc=100)
    kernels = [e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.PrivateUse1]
    assert kernels and {k.device_index() for k in kernels} == {1}


def test_max_events_per_nc_caps_the_recorded_kernels(tmp_path):
    a = torch.randn(32, device="neuron")
    a + 1
    _, prof = export(tmp_path, lambda: [a + 1 for _ in range(10)], max_events_per_nc=3)
    kernels = [e for e in prof.profiler.kineto_results.events() if e.device_type() == DeviceType.PrivateUse1]
    assert len(kernels) == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"capture_enabled_for_nc": "0-99"}, "capture_enabled_for_nc"),
    ({"max_events_per_nc": -1}, "max_events_per_nc"),
    ({"correlate_device_time": False}, "correlate_device_time"),
    ({"modes": ["gpu"]}, "gpu"),
    ({"target": "trn9"}, "trn9"),
    ({"neff_cache_dir": "/tmp/neff"}, "neff_cache_dir"),
])
def test_config_errors_are_clear(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NeuronConfig(**kwargs)


def test_target_generation_selects_the_cost_model(tmp_path):
    x = torch.randn(1 << 16, device="neuron")
    x.relu()
    trn2, _ = export(tmp_path / "trn2", lambda: x.relu(), target="trn2")
    trn3, _ = export(tmp_path / "trn3", lambda: x.relu(), target="trn3")
    assert trn3["Metadata"].to_pylist()[0]["target_generation"] == "trn3"

    def relu_estimate(tables: dict) -> float:
        row = next(r for r in tables["FrameworkOp"].to_pylist() if r["op_name"] == "aten::relu")
        return row["estimated_chip_time_us"]
    assert relu_estimate(trn3) < relu_estimate(trn2)  # memory-bound: 4.9 vs 2.9 TB/s


def test_profile_modes():
    assert {m.name for m in ProfileMode} == {"DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY"}


def test_max_events_per_nc_caps_the_launch_events_when_device_is_off(tmp_path):
    a = torch.randn(32, device="neuron")
    a + 1
    tables, _ = export(tmp_path, lambda: [a + 1 for _ in range(10)], modes=[ProfileMode.RUNTIME],
                       max_events_per_nc=3)
    launches = next(r for r in tables["RuntimeApi"].to_pylist() if r["name"] == "neuronLaunchKernel")
    assert launches["calls"] == 3
    [trace] = tmp_path.rglob("framework_trace.json")
    assert json.loads(trace.read_text())["neuron_dropped_events"] == 7


def test_explorers_documented_queries_run_on_our_profile(tmp_path, nki_unary):
    """The pandas queries of Explorer's "analyze profile output" page, unchanged, on a profile of a
    kernel-language op; Metadata names the schema version and SchemaFields describes every table."""
    import pandas as pd

    nki_cos = nki_unary("cos")
    x = torch.randn(128, 1, device="neuron")
    nki_cos(x)
    _, _ = export(tmp_path, lambda: nki_cos(x))
    [profile_dir] = {p.parent for p in tmp_path.rglob("Instruction.parquet")}
    # --- Explorer's documented snippets, with our profile directory ---
    df = pd.read_parquet(profile_dir / "Instruction.parquet")
    top = (df.groupby(["engine", "opcode"])["duration_ns"]
           .agg(["count", "sum"])
           .sort_values("sum", ascending=False)
           .head(10))
    # ---
    assert len(top) and set(top.index.get_level_values("engine")) <= {"Tensor", "Vector", "Scalar", "GpSimd", "DMA"}
    assert top["count"].sum() == len(df) and (top["sum"] >= 0).all()
    meta = pd.read_parquet(profile_dir / "Metadata.parquet").iloc[0]
    assert meta["profile_schema_version"] == "7.4.0" and bool(meta["is_simulation"])
    # Every device kernel but the first on its core has the stream-order edge saying what its gap
    # waited for; the launched ones have their launch edge.
    events = pd.read_parquet(profile_dir / "SystemProfileEvents.parquet")
    flow = pd.read_parquet(profile_dir / "Flow.parquet")
    kernels = events[(events["trace_event_source"] == "neuron_hw") & ~events["name"].str.startswith("cpu fallback")]
    order = flow[flow["dependency_type"] == "stream order"]
    assert len(order) == len(kernels) - kernels["nc_idx"].nunique()
    assert set(order["waited_for"]) <= {"host sync", "cpu fallback", "host launch", "collective", "queue"}
    assert (flow["gap_time"] >= 0).all() and (flow["dependency_type"] == "launch").any()
    summary = pd.read_parquet(profile_dir / "Summary.parquet").iloc[0]
    assert sum(summary[explorer_schema.idle_field(c)] for c in set(order["waited_for"])) == order["gap_time"].sum()
    fields = pd.read_parquet(profile_dir / "SchemaFields.parquet")
    for table in ("Instruction", "ActiveTime", "OpcodeSummary", "Metadata", "Summary", "SystemProfileEvents", "Flow"):
        written = pq.read_schema(profile_dir / f"{table}.parquet").names
        assert written == fields[fields["table_name"] == table]["field_name"].tolist()
