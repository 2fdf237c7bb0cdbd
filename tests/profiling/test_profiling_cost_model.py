"""Sanity of the chip cost model's ESTIMATES against first principles (published per-core figures), and
the estimates of recorded calls (without record_shapes) against hand-computed FLOPs and bytes."""
from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.profiling import NeuronConfig, cost_model
from torch_neuronx.profiling.analysis import tables
from torch_neuronx.profiling.graph_estimate import Assumptions
from torch_neuronx.runtime import chips

A = Assumptions()  # the fitted assumptions every estimate uses
OVERHEAD_S = A.kernel_overhead_s  # the fixed cost of a kernel

_DTYPE_BYTES = {"BFloat16": 2, "Float": 4, "Float8_e4m3fn": 1}


def t(*shape: int, dtype: str = "Float") -> dict:
    """A tensor as the shim describes it."""
    return {"shape": list(shape), "dtype": dtype, "bytes": math.prod(shape) * _DTYPE_BYTES[dtype]}


def call(inputs: list, outputs: list) -> dict:
    return {"inputs": inputs, "outputs": outputs}


def test_large_bf16_matmul_is_flops_over_the_bf16_rate_plus_the_fixed_overhead():
    """The roofline of module cost_model exactly: compute-bound, so 2n^3 / the logical core's bf16
    rate (two trn2 physical cores at the default NEURON_LOGICAL_NC_CONFIG=2) at the fitted matmul
    efficiency, plus the fixed cost of a kernel."""
    n = 4096
    hw = cost_model.hardware("trn2")
    bf16 = dict(dtype="BFloat16")
    est = cost_model.estimate("aten::mm", call([t(n, n, **bf16), t(n, n, **bf16)], [t(n, n, **bf16)]), hw)
    assert hw.tensor_flops_bf16 == 2 * chips.TRN2.tensor_flops[chips.BF16]
    assert est.flops == 2 * n**3
    assert est.engine == "TensorE" and est.bound == "compute"
    assert est.seconds == pytest.approx(2 * n**3 / (hw.tensor_flops_bf16 * A.matmul_efficiency) + OVERHEAD_S,
                                        rel=1e-12)
    assert est.tensor_peak_seconds == pytest.approx(2 * n**3 / hw.tensor_flops_bf16)  # MFU's denominator


def test_fp32_matmul_uses_the_fp32_tensor_rate():
    hw = cost_model.hardware("trn2")
    bf16 = cost_model.estimate("aten::mm", call([t(2048, 2048, dtype="BFloat16")] * 2,
                                                [t(2048, 2048, dtype="BFloat16")]), hw)
    fp32 = cost_model.estimate("aten::mm", call([t(2048, 2048)] * 2, [t(2048, 2048)]), hw)
    assert fp32.seconds > 3 * bf16.seconds  # 20 vs 79 TFLOP/s


def test_elementwise_op_is_bound_by_hbm_bandwidth():
    n = 1 << 22
    hw = cost_model.hardware("trn2")
    est = cost_model.estimate("aten::add.Tensor", call([t(n), t(n), 1], [t(n)]), hw)
    assert est.engine == "VectorE" and est.bound == "memory"
    per_core_bandwidth = 2.9e12 / 4 * A.hbm_efficiency
    assert est.bytes_moved == 3 * 4 * n
    assert est.seconds == pytest.approx(est.bytes_moved / per_core_bandwidth + OVERHEAD_S, rel=1e-12)


def test_trn3_has_more_bandwidth_than_trn2():
    relu = ("aten::relu", call([t(1 << 22)], [t(1 << 22)]))
    trn2 = cost_model.estimate(*relu, cost_model.hardware("trn2"))
    trn3 = cost_model.estimate(*relu, cost_model.hardware("trn3"))
    assert trn3.seconds < trn2.seconds


def test_no_tensors_means_no_estimate_and_unknown_generation_is_refused():
    assert cost_model.estimate("aten::mm", call([None, 1], []), cost_model.hardware()) is None
    with pytest.raises(ValueError, match="trn9"):
        cost_model.hardware("trn9")


def framework_ops(tmp_path, fn) -> dict[str, dict]:
    """FrameworkOp rows of a profile of ``fn`` recorded WITHOUT record_shapes."""
    nc = NeuronConfig(profile_output_dir=tmp_path)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc) as prof:
        fn()
    rows = tables(prof, cost_model.hardware(), "trn2", ["device"], "all")["FrameworkOp"].to_pylist()
    return {r["op_name"]: r for r in rows}


def test_recorded_matrix_ops_are_estimated_with_hand_computed_flops_and_bytes(tmp_path):
    a, b = torch.randn(32, 128, device="neuron"), torch.randn(128, 64, device="neuron")
    bias = torch.randn(64, device="neuron")
    x, y = torch.randn(4, 32, 128, device="neuron"), torch.randn(4, 128, 64, device="neuron")
    image, weight = torch.randn(2, 3, 16, 16, device="neuron"), torch.randn(8, 3, 3, 3, device="neuron")

    def step():
        return a @ b, torch.addmm(bias, a, b), torch.bmm(x, y), torch.conv2d(image, weight)
    step()  # first calls build their kernels; the profiled ones are the steady state
    ops = framework_ops(tmp_path, step)
    f = 4  # float32 bytes
    mm, addmm, bmm = ops["aten::mm"], ops["aten::addmm"], ops["aten::bmm"]
    assert mm["estimated_flops"] == 2 * 32 * 128 * 64
    assert mm["estimated_bytes_moved"] == f * (32 * 128 + 128 * 64 + 32 * 64)
    assert addmm["estimated_flops"] == 2 * 32 * 128 * 64
    assert addmm["estimated_bytes_moved"] == f * (64 + 32 * 128 + 128 * 64 + 32 * 64)
    assert bmm["estimated_flops"] == 4 * 2 * 32 * 128 * 64
    assert bmm["estimated_bytes_moved"] == f * 4 * (32 * 128 + 128 * 64 + 32 * 64)
    conv = ops["aten::convolution_overrideable"]
    out_pixels = 2 * 14 * 14  # batch x output height x width, 3x3 kernel without padding
    assert conv["estimated_flops"] == 2 * out_pixels * 8 * 3 * 3 * 3
    assert conv["estimated_bytes_moved"] == f * (2 * 3 * 16 * 16 + 8 * 3 * 3 * 3 + 2 * 8 * 14 * 14)
    assert {mm["estimated_engine"], addmm["estimated_engine"], bmm["estimated_engine"],
            conv["estimated_engine"]} == {"TensorE"}


def test_foreach_ops_are_estimated_over_their_lists(tmp_path):
    xs = [torch.randn(n, device="neuron") for n in (100, 200, 300)]
    ys = [torch.randn(n, device="neuron") for n in (100, 200, 300)]
    torch._foreach_add_(xs, ys)
    ops = framework_ops(tmp_path, lambda: torch._foreach_add_(xs, ys))
    foreach = ops["aten::_foreach_add_.List"] if "aten::_foreach_add_.List" in ops else ops["aten::_foreach_add_"]
    assert foreach["estimated_engine"] == "VectorE"
    assert foreach["estimated_flops"] == 600  # one add per element written
    assert foreach["estimated_bytes_moved"] == 4 * 600 * 3  # read xs and ys, write xs


def test_copy_estimates_move_the_source_over_the_host_link_or_through_hbm():
    hw = cost_model.hardware("trn2")
    h2d = cost_model.estimate_copy("aten::_copy_from (host to device)", call([t(1024)], [t(1024)]), hw)
    assert h2d.engine == "DMA" and h2d.flops == 0 and h2d.bytes_moved == 4096
    assert h2d.seconds == pytest.approx(4096 / 32e9 + 2e-6 / 16)
    # A converting copy moves the source's bytes; converting is the far side's work.
    d2h = cost_model.estimate_copy("aten::_copy_from (device to host)",
                                   call([t(1024, dtype="BFloat16")], [t(1024)]), hw)
    assert d2h.bytes_moved == 2048
    d2d = cost_model.estimate_copy("aten::_copy_from (core to core)", call([t(1024)], [t(1024)]), hw)
    assert d2d.bytes_moved == 8192  # read and written in HBM
    assert d2d.seconds == pytest.approx(8192 / (2.9e12 / 4) + 2e-6 / 16)
    assert cost_model.estimate_copy("aten::mm", call([t(4, 4)] * 2, [t(4, 4)]), hw) is None


def test_recorded_copies_are_estimated_with_hand_computed_bytes(tmp_path):
    host = torch.randn(64, 32)
    device = torch.randn(64, 32, device="neuron")
    other = torch.empty(64, 32, device="neuron", dtype=torch.bfloat16)
    link_s, dma_s, hbm = 32e9, 2e-6 / 16, 2.9e12 / 4
    for i, (copy, moved, seconds) in enumerate([
            (lambda: host.to("neuron"), 64 * 32 * 4, 64 * 32 * 4 / link_s),                 # host to device
            (lambda: device.cpu(), 64 * 32 * 4, 64 * 32 * 4 / link_s),                       # device to host
            (lambda: other.copy_(device), 64 * 32 * (4 + 2), 64 * 32 * (4 + 2) / hbm)]):   # device to device
        copy()
        torch.neuron.synchronize()
        row = framework_ops(tmp_path / str(i), copy)["aten::_copy_from"]
        assert row["calls"] == 1 and row["estimated_engine"] == "DMA" and row["estimated_flops"] == 0
        assert row["estimated_bytes_moved"] == moved
        assert row["estimated_chip_time_us"] == pytest.approx((seconds + dma_s) * 1e6)


def test_a_fallbacks_copies_are_charged_to_the_fallback_only(tmp_path):
    import warnings
    x = torch.randn(1024, device="neuron", dtype=torch.float64)
    with warnings.catch_warnings():  # the fallback warns once per process
        warnings.simplefilter("ignore")
        torch.exp(x)
        ops = framework_ops(tmp_path, lambda: torch.exp(x))
    assert ops["aten::exp"]["estimated_bytes_moved"] == 2 * 1024 * 8  # read x, write the result
    # Its copies run inside the fallback's kernel: no second charge.
    assert ops.get("aten::_copy_from", {}).get("estimated_bytes_moved") is None


def _compiled_rows(tmp_path, fn) -> tuple[list[dict], dict]:
    """FrameworkOp rows of the compiled graphs in a profile of ``fn``, and its Summary."""
    fn()  # compiles
    torch.neuron.synchronize()
    nc = NeuronConfig(profile_output_dir=tmp_path)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc) as prof:
        fn()
        torch.neuron.synchronize()
    result = tables(prof, cost_model.hardware(), "trn2", ["device"], "all")
    rows = [r for r in result["FrameworkOp"].to_pylist() if r["execution"] == "compiled"]
    return rows, result["Summary"].to_pylist()[0]


def test_compiled_graph_is_estimated_from_its_matmul_flops_and_its_inputs_and_outputs(tmp_path):
    m, k, n = 64, 128, 32
    a, b = torch.randn(m, k, device="neuron"), torch.randn(k, n, device="neuron")
    compiled = torch.compile(lambda a, b: (a @ b).relu(), backend="neuron")
    with torch.no_grad():
        [row], _ = _compiled_rows(tmp_path, lambda: compiled(a, b))
    flops, moved = 2 * m * k * n, 4 * (m * k + k * n + m * n)  # fp32; the mm result stays on chip
    assert row["estimated_flops"] == flops and row["estimated_bytes_moved"] == moved
    assert row["estimated_engine"] == "TensorE"
    # One kernel, relu its epilogue: the fitted shares of the fp32 rate and the bandwidth (LNC=2).
    fp32 = 2 * chips.TRN2.tensor_flops[chips.FP32] * A.matmul_efficiency
    hbm = 2 * chips.TRN2.hbm_bytes_per_s / 8 * A.hbm_efficiency
    seconds = max(flops / fp32, moved / hbm) + OVERHEAD_S
    assert row["estimated_chip_time_us"] == pytest.approx(seconds * 1e6)


def test_compiled_mlp_training_step_flops_are_the_hand_computed_matmul_sums(tmp_path):
    m, k, h, n = 16, 32, 64, 8
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, h), torch.nn.ReLU(), torch.nn.Linear(h, n)).to("neuron")
    x = torch.randn(m, k, device="neuron")
    loss = torch.compile(lambda x: model(x).sum(), backend="neuron")
    rows, summary = _compiled_rows(tmp_path, lambda: loss(x).backward())
    forward = 2 * m * k * h + 2 * m * h * n
    backward = 2 * (2 * m * h * n) + 2 * m * k * h  # both grads of layer 2; layer 1's weight grad only
    assert sorted(r["estimated_flops"] for r in rows) == sorted([forward, backward])
    assert all(r["estimated_chip_time_us"] > 0 and r["estimated_bytes_moved"] > 0 for r in rows)
    assert {r["estimated_engine"] for r in rows} == {"TensorE"}
    assert summary["total_time"] > 0 and summary["model_flops"] >= forward + backward


def test_graph_cost_writes_a_viewed_result_once_and_a_reused_kernel_name_is_ambiguous():
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_neuronx.compile import cost
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    gm = make_fx(lambda a, b: ((a @ b).t(), a.t()))(a, b)  # a view of the result, a view of an input
    assert cost.count(gm) == cost.GraphCost({"float32": 2 * 8 * 16 * 4}, 4 * (8 * 16 + 16 * 4 + 8 * 4))
    cost.record("test::graph", cost.count(gm))
    cost.record("test::graph", cost.count(gm))  # compiled again, same graph: same cost
    assert cost.graph_cost("test::graph") == cost.count(gm)
    cost.record("test::graph", cost.count(make_fx(lambda a: a @ a.t())(a)))
    assert cost.graph_cost("test::graph") is None


MM = ("aten::mm", call([t(4096, 4096, dtype="BFloat16")] * 2, [t(4096, 4096, dtype="BFloat16")]))
ADD = ("aten::add.Tensor", call([t(1 << 22), t(1 << 22), 1], [t(1 << 22)]))


@pytest.mark.parametrize("op", [MM, ADD], ids=["compute-bound", "memory-bound"])
def test_a_logical_core_of_two_physical_cores_halves_compute_and_memory_bound_estimates(op):
    one, two = (cost_model.estimate(*op, cost_model.hardware("trn2", n)) for n in (1, 2))
    assert one.bound == two.bound
    assert two.seconds - OVERHEAD_S == pytest.approx((one.seconds - OVERHEAD_S) / 2, rel=1e-12)


def test_logical_core_rates_are_the_physical_figures_times_the_grouping():
    for chip in chips.CHIPS.values():
        for n in (1, 2):
            hw = cost_model.hardware(chip.name, n)
            assert hw.tensor_flops_bf16 == n * chip.tensor_flops[chips.BF16]
            assert hw.tensor_flops_fp8 == n * chip.tensor_flops[chips.FP8]
            assert hw.vector_flops == n * chip.vector_flops
            width, clock = chip.lane_elements_per_cycle["vector"], chip.engine_clock_hz["vector"]
            assert hw.vector_elements_per_s == n * width * clock
            assert hw.dma_bytes_per_s == chip.hbm_bytes_per_s * n / chip.physical_cores


def test_trn3_uses_its_own_published_figures():
    trn2, trn3 = cost_model.hardware("trn2"), cost_model.hardware("trn3")
    # Plain FP8 is 2x BF16 on both; only trn3 has the MX formats, at 4x.
    assert trn3.tensor_flops_fp8 == 2 * 158e12 and trn2.tensor_flops_fp8 == 2 * 158e12
    assert trn3.tensor_flops_mx == 2 * 315e12 and trn2.tensor_flops_mx == 0.0
    assert cost_model.tensor_rate(trn3, "float8_e4m3fn_x4") == 2 * 315e12
    with pytest.raises(ValueError, match="trn2 has no microscaling"):
        cost_model.tensor_rate(trn2, "mx")
    assert cost_model.tensor_rate(trn3, "int8") == trn3.tensor_flops_fp32
    assert trn3.vector_flops == 2 * 1.2e12 and trn2.vector_flops == 2 * 1.0e12
    fp8 = ("aten::mm", call([t(4096, 4096, dtype="Float8_e4m3fn")] * 2, [t(4096, 4096, dtype="BFloat16")]))
    est = cost_model.estimate(*fp8, trn3)
    fp8_rate = 2 * chips.TRN3.tensor_flops[chips.FP8] * A.matmul_efficiency
    assert est.seconds == pytest.approx(2 * 4096**3 / fp8_rate + OVERHEAD_S)
    relu = cost_model.estimate("aten::relu", call([t(1 << 22)], [t(1 << 22)]), trn3)
    hbm = chips.TRN3.hbm_bytes_per_s / 4 * A.hbm_efficiency
    assert relu.seconds == pytest.approx(relu.bytes_moved / hbm + OVERHEAD_S)


def test_a_failing_flop_formula_is_an_error_with_its_reason_not_an_elementwise_estimate():
    # mm's formula unpacks 2-D shapes: a 3-D call makes it raise.
    with pytest.raises(cost_model.CostModelError, match="FLOP formula of mm failed: ValueError"):
        cost_model.estimate("aten::mm", call([t(2, 3, 4), t(4, 5)], [t(2, 3, 5)]), cost_model.hardware())


def _profile(tmp_path, fn) -> dict:
    nc = NeuronConfig(profile_output_dir=tmp_path)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc) as prof:
        fn()
        torch.neuron.synchronize()
    return tables(prof, cost_model.hardware(), "trn2", ["device"], "all")


def test_a_failing_flop_formula_leaves_the_operator_unestimated_with_its_reason(tmp_path, monkeypatch):
    from torch.utils.flop_counter import flop_registry
    a = torch.randn(64, 64, device="neuron")
    a @ a

    def broken(*args, **kwargs):
        raise RuntimeError("formula bug")
    monkeypatch.setitem(flop_registry, torch.ops.aten.mm, broken)
    result = _profile(tmp_path, lambda: a @ a)
    row = {r["op_name"]: r for r in result["FrameworkOp"].to_pylist()}["aten::mm"]
    assert row["estimated_chip_time_us"] is None and row["estimated_flops"] is None
    assert row["unestimated_reason"] == "FLOP formula of mm failed: RuntimeError: formula bug"
    summary = result["Summary"].to_pylist()[0]
    assert summary["unestimated_ops"] == 1 and summary["model_flops"] == 0


def test_mfu_divides_by_the_peak_of_the_flops_dtype(tmp_path):
    n = 1024  # fp32: compute-bound on a trn2 logical core
    a = torch.randn(n, n, device="neuron")
    a @ a
    summary = _profile(tmp_path, lambda: a @ a)["Summary"].to_pylist()[0]
    peak = 2 * n**3 / (2 * chips.TRN2.tensor_flops[chips.FP32])
    assert summary["model_flops"] == summary["hardware_flops"] == 2 * n**3
    # MFU: the FLOPs at peak over the estimated time (the fitted efficiency plus the fixed cost).
    assert summary["mfu_estimated_percent"] == pytest.approx(100 * peak / (peak / A.matmul_efficiency + OVERHEAD_S))
    assert summary["hfu_estimated_percent"] == summary["mfu_estimated_percent"]


def test_model_flops_exclude_vector_work_and_host_fallbacks_and_framework_ops_have_no_instructions(tmp_path):
    import warnings
    x, y = torch.randn(1024, device="neuron"), torch.randn(1024, device="neuron", dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = lambda: (x.relu(), torch.exp(y), torch.mm(y.view(32, 32), y.view(32, 32)))  # noqa: E731
        fn()
        result = _profile(tmp_path, fn)
    summary = result["Summary"].to_pylist()[0]
    ops = {r["op_name"]: r for r in result["FrameworkOp"].to_pylist()}
    assert ops["aten::mm"]["is_fallback"] and ops["aten::mm"]["estimated_flops"] == 2 * 32**3
    assert summary["model_flops"] == summary["hardware_flops"] == 0
    assert all(summary[f"{e}_engine_instruction_count"] == 0 for e in ("tensor", "vector", "scalar", "gpsimd"))


def test_kernel_language_transposes_are_hardware_flops_not_model_flops():
    import types

    import ml_dtypes
    import numpy as np

    import nki
    import nki.language as nl
    import nki.legacy.isa as nisa  # the return-a-tile spelling
    from torch_neuronx.profiling import analysis

    @nki.jit
    def kernel(a, b, out):
        ta, tb = nl.load(a), nl.load(b)
        nl.store(out, value=nl.copy(nisa.nc_matmul(ta, tb)))
        nl.transpose(ta)
        return out
    k, m, n = 128, 64, 256
    a, b = np.ones((k, m), ml_dtypes.bfloat16), np.ones((k, n), ml_dtypes.bfloat16)
    nki.simulate(kernel)(a, b, np.zeros((m, n), np.float32))
    report = nki.simulator.last_report()
    op = analysis._Op()
    analysis._charge_simulated(op, types.SimpleNamespace(report=report))
    rate = chips.TRN2.tensor_flops[chips.BF16]  # the simulator's unit: one physical core
    assert op.model_flops == 2 * k * m * n and op.model_peak_s == pytest.approx(2 * k * m * n / rate)
    assert op.transpose_flops == 2 * k * k * m and op.transpose_peak_s == pytest.approx(2 * k * k * m / rate)


def test_a_compiled_graph_whose_flop_formula_fails_is_unestimated(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils.flop_counter import flop_registry

    from torch_neuronx.compile import cost

    def broken(*args, **kwargs):
        raise RuntimeError("formula bug")
    monkeypatch.setitem(flop_registry, torch.ops.aten.mm, broken)
    graph = cost.count(make_fx(lambda a, b: a @ b)(torch.randn(8, 16), torch.randn(16, 4)))
    assert graph.matmul_flops == {} and len(graph.unestimated) == 1
    assert "RuntimeError: formula bug" in graph.unestimated[0]
    with pytest.raises(cost_model.CostModelError, match="formula bug"):
        cost_model.estimate_compiled(graph, cost_model.hardware())


def test_a_collective_is_a_ring_on_the_cores_share_of_the_chips_neuronlink():
    """A 64 MB all-reduce on 4 ranks: 2(n-1)/n of the bytes through a logical core's share of the
    chip's published NeuronLink bandwidth (2 of 8 physical cores) at the fitted link efficiency,
    plus the assumed latency of each of recursive halving-doubling's 2 log2(n) steps; trn3's link
    (2.56 TB/s against 1.28) halves the transfer."""
    n, size = 4, 64 << 20
    message = {"collective": "all_reduce", "group_size": n, "bytes": size}
    for generation, link in (("trn2", 1.28e12), ("trn3", 2.56e12)):
        est = cost_model.estimate_collective(message, generation, logical_nc_config=2)
        transfer = size * 1.5 / (link * 2 / 8 * Assumptions().link_efficiency)
        assert est.seconds == pytest.approx(4 * cost_model.COLLECTIVE_STEP_SECONDS + transfer, rel=1e-12)
        assert est.engine == "NeuronLink" and est.bytes_moved == int(size * 1.5) and est.flops == 0
