"""Sanity of the chip cost model's ESTIMATES against first principles (SPEC §1.2 figures), and
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


def test_large_bf16_matmul_is_within_2x_of_flops_over_peak():
    n = 4096
    hw = cost_model.hardware("trn2")
    bf16 = dict(dtype="BFloat16")
    est = cost_model.estimate("aten::mm", call([t(n, n, **bf16), t(n, n, **bf16)], [t(n, n, **bf16)]), hw)
    ideal = 2 * n**3 / 79e12
    assert est.flops == 2 * n**3
    assert est.engine == "TensorE" and est.bound == "compute"
    assert ideal <= est.seconds <= 2 * ideal


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
