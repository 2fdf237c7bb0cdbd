"""Costing a recorded operator sequence as a compiled graph (fused kernels) or eagerly (a launch each)."""
from __future__ import annotations

import pytest
import torch

from torch_neuronx.profiling import graph_estimate as ge, op_trace
from torch_neuronx.profiling.cost_model import hardware

HW = hardware("trn2", 2)
A = ge.Assumptions()


def _mlp_ops(rows: int = 256, width: int = 512):
    x = torch.empty(rows, width, device="meta", dtype=torch.bfloat16)
    w1 = torch.empty(width, 4 * width, device="meta", dtype=torch.bfloat16)
    w2 = torch.empty(4 * width, width, device="meta", dtype=torch.bfloat16)
    return op_trace.record(lambda r: (torch.relu(x @ w1) * 2.0 + 1.0) @ w2), (x, w1, w2)


def test_a_matmuls_element_wise_epilogue_fuses_into_it_and_keeps_its_intermediates_on_chip():
    ops, (x, w1, w2) = _mlp_ops()
    regions = ge.fuse(ops)
    assert [[o.name for o in r] for r in regions] == [["mm", "relu", "mul", "add"], ["mm"]]
    hidden = x.shape[0] * w1.shape[1] * 2
    # The first kernel writes only the second matmul's input: the matmul's result and relu's and
    # mul's outputs stay on chip.
    assert ge._traffic(regions) == [x.nbytes + w1.nbytes + hidden, hidden + w2.nbytes + x.nbytes]
    eager_bytes = sum(sum(n for _, n in o.reads) + sum(n for _, n in o.writes) for o in ops)
    compiled = ge.compiled(ops, HW)["forward"]
    assert compiled.kernels == 2 and compiled.bytes_moved < eager_bytes


def test_element_wise_work_not_consuming_a_matmul_is_a_kernel_of_its_own():
    x = torch.empty(64, 64, device="meta")
    w = torch.empty(64, 64, device="meta")
    ops = op_trace.record(lambda r: (x @ w, torch.exp(x) + 1))  # exp reads x, not the matmul's result
    assert [[o.name for o in r] for r in ge.fuse(ops)] == [["mm"], ["exp", "add"]]


def test_a_kernel_is_its_slowest_resource_plus_a_fixed_cost():
    ops, (x, w1, w2) = _mlp_ops(rows=4096, width=4096)
    first = ge.kernel_cost([ops[0]], x.nbytes + w1.nbytes + 4096 * 16384 * 2, HW, A, None)
    flops = 2 * 4096 * 4096 * 16384
    assert first.tensor_flops == flops and first.bound == ge.TENSOR_BOUND
    assert first.seconds == pytest.approx(flops / (HW.tensor_flops_bf16 * A.matmul_efficiency) + A.kernel_overhead_s)
    # FP8 operands: twice the trn2 rate, half the operand bytes.
    fp8 = ge.compiled(ops[:1], HW, matmul_dtype="float8_e4m3fn")["forward"]
    assert fp8.seconds_by_bound[ge.TENSOR_BOUND] == pytest.approx(first.seconds_by_bound[ge.TENSOR_BOUND] / 2)


def test_eager_pays_a_launch_per_operator_the_device_idles_on_when_kernels_are_short():
    ops, _ = _mlp_ops(rows=8, width=64)  # tiny kernels: the host is the bottleneck
    eager = ge.eager(ops, HW)["forward"]
    assert eager.kernels == len(ops) == 5
    last = ops[-1]
    last_kernel = ge.kernel_cost([last], sum(n for _, n in last.reads) + sum(n for _, n in last.writes), HW, A, None)
    # Every kernel ends before the next launch: the step is the launches plus the last kernel.
    assert eager.seconds == pytest.approx(len(ops) * A.host_launch_s + last_kernel.seconds)
    assert eager.bound == ge.HOST and eager.seconds > ge.compiled(ops, HW)["forward"].seconds
    big, _ = _mlp_ops(rows=4096, width=4096)  # long kernels hide all launches but the first ones
    assert ge.eager(big, HW)["forward"].seconds_by_bound[ge.HOST] < 3 * A.host_launch_s


def test_costs_add_and_scale_by_bound():
    a = ge.Cost({ge.TENSOR_BOUND: 2.0, ge.OVERHEAD: 0.5}, 10, 100, 2)
    b = ge.Cost({ge.HBM_BOUND: 3.0}, 0, 50, 1)
    total = a + b * 2
    assert total.seconds_by_bound == {ge.TENSOR_BOUND: 2.0, ge.OVERHEAD: 0.5, ge.HBM_BOUND: 6.0}
    assert (total.tensor_flops, total.bytes_moved, total.kernels, total.bound) == (10, 200, 4, ge.HBM_BOUND)
    assert (total - b * 2).seconds == pytest.approx(a.seconds)
