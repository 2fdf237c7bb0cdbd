"""Sanity of the chip cost model's ESTIMATES against first principles (published per-core figures), and
the estimates of recorded calls (without record_shapes) against hand-computed FLOPs and bytes."""
from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, cost_model
from torch_neuronx.profiling.analysis import tables

_DTYPE_BYTES = {"BFloat16": 2, "Float": 4}


def t(*shape: int, dtype: str = "Float") -> dict:
    """A tensor as the shim describes it."""
    return {"shape": list(shape), "dtype": dtype, "bytes": math.prod(shape) * _DTYPE_BYTES[dtype]}


def call(inputs: list, outputs: list) -> dict:
    return {"inputs": inputs, "outputs": outputs}


def test_large_bf16_matmul_is_flops_over_the_bf16_peak_plus_the_fixed_overhead():
    """The roofline of module cost_model exactly: compute-bound, so 2n^3 / TensorE's bf16 rate
    (79 TFLOP/s per trn2 core) plus the instruction overhead."""
    n = 4096
    hw = cost_model.hardware("trn2")
    bf16 = dict(dtype="BFloat16")
    est = cost_model.estimate("aten::mm", call([t(n, n, **bf16), t(n, n, **bf16)], [t(n, n, **bf16)]), hw)
    assert hw.tensor_flops_bf16 == pytest.approx(79e12, rel=0.01)
    assert est.flops == 2 * n**3
    assert est.engine == "TensorE" and est.bound == "compute"
    assert est.seconds == pytest.approx(2 * n**3 / hw.tensor_flops_bf16 + hw.compute_overhead_cycles / hw.clock_hz,
                                        rel=1e-12)


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
    per_core_bandwidth = 2.9e12 / 4
    assert est.bytes_moved == 3 * 4 * n
    assert est.seconds == pytest.approx(est.bytes_moved / per_core_bandwidth, rel=0.05)


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
    seconds = max(flops / 20e12, moved / (2.9e12 / 4)) + 64 / 1.4e9
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
    assert summary["estimated_chip_time_us"] > 0 and summary["model_flops"] >= forward + backward


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
