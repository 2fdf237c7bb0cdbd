"""The estimated chip timeline (EstimatedActivity) and where operators came from (stack frames,
module paths), checked against the cost model's formulas and the recording's own source."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from nki.simulator import cost_model as cm
from torch_neuronx import _C
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, chip_timeline, cost_model


@pytest.mark.parametrize("target", ["trn1", "trn3"])
def test_retimed_instruction_equals_the_formula_on_the_other_generation(target):
    src, dst = cm.TRN2, cm.GENERATIONS[target]
    cases = [(cm.TENSOR, "bfloat16", lambda c: cm.matmul_seconds(c, 512, np.dtype("float32")), "float32"),
             (cm.TENSOR, "float8_e4m3fn", lambda c: cm.matmul_seconds(c, 128, "float8_e4m3fn"), "float8_e4m3fn"),
             (cm.VECTOR, "float32", lambda c: cm.lane_seconds(c, cm.VECTOR, 2048, 2), "float32"),
             (cm.SCALAR, "float32", lambda c: cm.lane_seconds(c, cm.SCALAR, 512), "float32"),
             (cm.GPSIMD, "float32", lambda c: cm.lane_seconds(c, cm.GPSIMD, 64), "float32"),
             (cm.DMA, "float32", lambda c: cm.dma_seconds(c, 1 << 20), "float32")]
    for engine, _, formula, dtype in cases:
        assert cm.retimed_seconds(engine, dtype, formula(src), src, dst) == pytest.approx(formula(dst), rel=1e-12)


def test_an_mx_matmul_cannot_be_retimed_for_a_generation_without_mx():
    seconds = cm.matmul_seconds(cm.TRN3, 128, cm.MX)
    with pytest.raises(ValueError, match="trn3"):
        cm.retimed_seconds(cm.TENSOR, cm.MX, seconds, cm.TRN3, cm.TRN2)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_operators_carry_their_module_path_source_line_and_chip_estimates(tmp_path):
    model, x = Tiny().to("neuron"), torch.randn(512, 1024, device="neuron")
    model(x)
    torch.neuron.synchronize()  # the warm-up's kernels finish before the profile
    nc = NeuronConfig(profile_output_dir=tmp_path)
    exporter = NeuronProfiler(nc)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                 on_trace_ready=exporter.export_trace, with_stack=True):
        call_line = inspect.currentframe().f_lineno + 1
        model(x)
        torch.neuron.synchronize()
    out = exporter.last_output_dir
    events = pq.read_table(out / "SystemProfileEvents.parquet").to_pylist()
    kernels = [e for e in events if e["trace_event_source"] == "neuron_hw" and e["name"] == "aten::addmm"]
    assert kernels and all(k["module_path"] == "Tiny_0/Linear_0" for k in kernels)
    estimated_ids = {r["event_id"] for r in pq.read_table(out / "EstimatedActivity.parquet").to_pylist()
                     if r["engine"] == "TensorE"}
    [kernel] = [k for k in kernels if k["id"] in estimated_ids]  # the matmul (not its scalar's copy)
    frames = {int(r["id"]): r for r in pq.read_table(out / "StackFrame.parquet").to_pylist()}
    locations = {int(r["id"]): r for r in pq.read_table(out / "StackFrameFileLocation.parquet").to_pylist()}
    files = {int(r["id"]): r["name"] for r in pq.read_table(out / "StackFrameFileName.parquet").to_pylist()}
    chain, frame = [], kernel["stack_frame_id"]
    while frame:
        loc = locations[frames[frame]["file_location_id"]]
        chain.append((files[loc["file_name_id"]], loc["line_number"]))
        frame = int(frames[frame]["parent_frame_id"])
    assert chain[0] == (__file__, inspect.getsourcelines(Tiny.forward)[1] + 1)  # `return self.proj(x)`
    assert (__file__, call_line) in chain
    nodes = {r["node_name"]: r for r in pq.read_table(out / "FrameworkNode.parquet").to_pylist()}
    assert nodes["Tiny_0/Linear_0"]["parent_name"] == "Tiny_0"
    estimated = [r for r in pq.read_table(out / "EstimatedActivity.parquet").to_pylist()
                 if r["event_id"] == kernel["id"]]
    assert {r["generation"] for r in estimated} == set(chip_timeline.GENERATIONS)
    by_gen = {r["generation"]: r["duration_ns"] for r in estimated}
    # Each generation's bar is the cost model's estimate of this call on that chip's core.
    call = json.loads(_C._profiler_kernel_args()[(kernel["nc_idx"], kernel["start_ts"])])
    lnc = pq.read_table(out / "Metadata.parquet").to_pylist()[0]["logical_nc_config"]
    for generation, ns in by_gen.items():
        expected = cost_model.estimate("aten::addmm", call, cost_model.hardware(generation, lnc)).seconds
        assert abs(ns - expected * 1e9) <= 1
    assert len(set(by_gen.values())) > 1  # the generations differ
    assert all(r["engine"] == "TensorE" for r in estimated)
