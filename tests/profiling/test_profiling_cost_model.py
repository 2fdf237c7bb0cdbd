"""Sanity of the chip cost model's ESTIMATES against first principles (SPEC §1.2 figures)."""
from __future__ import annotations

import pytest

from torch_neuronx.profiling import cost_model


def test_large_bf16_matmul_is_within_2x_of_flops_over_peak():
    n = 4096
    hw = cost_model.hardware("trn2")
    est = cost_model.estimate("aten::mm", [[n, n], [n, n]], ["c10::BFloat16"] * 2, None, hw)
    ideal = 2 * n**3 / 79e12
    assert est.flops == 2 * n**3
    assert est.engine == "TensorE" and est.bound == "compute"
    assert ideal <= est.seconds <= 2 * ideal


def test_fp32_matmul_uses_the_fp32_tensor_rate():
    hw = cost_model.hardware("trn2")
    bf16 = cost_model.estimate("aten::mm", [[2048, 2048]] * 2, ["c10::BFloat16"] * 2, None, hw)
    fp32 = cost_model.estimate("aten::mm", [[2048, 2048]] * 2, ["float"] * 2, None, hw)
    assert fp32.seconds > 3 * bf16.seconds  # 20 vs 79 TFLOP/s


def test_addmm_and_bmm_use_pytorch_flop_formulas():
    hw = cost_model.hardware("trn2")
    addmm = cost_model.estimate("aten::addmm", [[64], [32, 128], [128, 64], [], []],
                                ["float"] * 3 + ["Scalar"] * 2, [None, None, None, 1, 1], hw)
    bmm = cost_model.estimate("aten::bmm", [[4, 32, 128], [4, 128, 64]], ["float"] * 2, None, hw)
    assert addmm.engine == bmm.engine == "TensorE"
    assert addmm.flops == 2 * 32 * 128 * 64 and bmm.flops == 4 * 2 * 32 * 128 * 64


def test_elementwise_op_is_bound_by_hbm_bandwidth():
    n = 1 << 22
    hw = cost_model.hardware("trn2")
    est = cost_model.estimate("aten::add", [[n], [n], []], ["float", "float", "Scalar"], None, hw)
    assert est.engine == "VectorE" and est.bound == "memory"
    per_core_bandwidth = 2.9e12 / 4
    assert est.bytes_moved == 3 * 4 * n
    assert est.seconds == pytest.approx(est.bytes_moved / per_core_bandwidth, rel=0.05)


def test_trn3_has_more_bandwidth_than_trn2():
    args = ("aten::relu", [[1 << 22]], ["float"], None)
    trn2 = cost_model.estimate(*args, cost_model.hardware("trn2"))
    trn3 = cost_model.estimate(*args, cost_model.hardware("trn3"))
    assert trn3.seconds < trn2.seconds


def test_no_shapes_means_no_estimate_and_unknown_generation_is_refused():
    assert cost_model.estimate("aten::mm", [[], []], ["", ""], None, cost_model.hardware()) is None
    with pytest.raises(ValueError, match="trn9"):
        cost_model.hardware("trn9")
