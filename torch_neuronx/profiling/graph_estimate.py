"""ESTIMATED device time of a recorded operator sequence (:mod:`.op_trace`) on one logical core, the
way it would run compiled or eager.

- **Compiled**: the sequence is one graph cut into fused kernels as a graph compiler cuts it:
  each matrix operator is a kernel together with the element-wise run consuming its result (its
  epilogue), each flash attention is a kernel, and the other element-wise and reduction operators
  between two of them (in one phase) fuse into one kernel. A fused kernel reads from HBM only the
  tensors produced outside it (parameters, inputs, other kernels' results) and writes only what
  is read outside it or never read again (gradients, outputs); its intermediates stay in SBUF.
- **Eager**: every operator is a kernel of its own (reads and writes all its tensors) launched by
  the host, which spends :attr:`Assumptions.host_launch_s` per launch; launches are queued
  asynchronously, so the device idles only when the host falls behind.

A kernel takes ``max(TensorE, lane engines, HBM) + kernel overhead``: TensorE at the dtype's
published rate times :attr:`Assumptions.matmul_efficiency`, the lane engines (VectorE and ScalarE
sharing the element work) at their published element rates, HBM at the core's share of the chip's
bandwidth times :attr:`Assumptions.hbm_efficiency`. The efficiencies and overheads are
assumptions FITTED to published measurements (benchmarks/cost_model_validation.py marks the rows
they were fitted on); every figure is an estimate.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from nki.simulator.cost_model import HardwareConfig, tensor_rate

from .op_trace import ATTENTION, ELEMENTWISE, MATMUL, Op

TENSOR_BOUND, LANE_BOUND, HBM_BOUND = "TensorE", "VectorE/ScalarE", "HBM"
OVERHEAD, HOST = "kernel overhead", "host launch"


@dataclass(frozen=True)
class Assumptions:
    """The parameters no chip fact gives. Defaults fitted on the rows marked ``fitted`` in
    benchmarks/cost_model_validation.py (docs/cost-model.md)."""

    matmul_efficiency: float = 0.4   # fraction of TensorE peak a compiled matmul sustains
    hbm_efficiency: float = 0.9      # fraction of HBM bandwidth a kernel's DMA sustains
    kernel_overhead_s: float = 4e-6  # per kernel: DMA descriptors, semaphores, pipeline fill
    host_launch_s: float = 25e-6     # eager: host time to launch one operator (published eager mode)
    link_step_s: float = 6e-6        # one latency step of a collective over NeuronLink
    link_efficiency: float = 0.33    # fraction of its NeuronLink share a collective's transfers sustain
    efa_step_s: float = 15e-6        # the same between instances over EFA


@dataclass
class Cost:
    """Estimated seconds of a set of kernels by what bounds them, with their work; additive."""

    seconds_by_bound: dict[str, float] = field(default_factory=dict)
    tensor_flops: int = 0
    bytes_moved: int = 0
    kernels: int = 0

    @property
    def seconds(self) -> float:
        return sum(self.seconds_by_bound.values())

    @property
    def bound(self) -> str:
        """What most of the time is spent on."""
        return max(self.seconds_by_bound, key=self.seconds_by_bound.get) if self.seconds_by_bound else "-"

    def __add__(self, other: Cost) -> Cost:
        merged = dict(self.seconds_by_bound)
        for k, v in other.seconds_by_bound.items():
            merged[k] = merged.get(k, 0.0) + v
        return Cost(merged, self.tensor_flops + other.tensor_flops, self.bytes_moved + other.bytes_moved,
                    self.kernels + other.kernels)

    def __mul__(self, n: float) -> Cost:
        return Cost({k: v * n for k, v in self.seconds_by_bound.items()}, round(self.tensor_flops * n),
                    round(self.bytes_moved * n), round(self.kernels * n))

    __rmul__ = __mul__

    def __sub__(self, other: Cost) -> Cost:
        return self + other * -1


def fuse(ops: Iterable[Op]) -> list[list[Op]]:
    """Fused kernels of a compiled graph: each matrix operator with the element-wise run that
    consumes its result (an epilogue, applied as the result leaves PSUM), each attention alone,
    and the other element-wise runs between them (within one phase) together."""
    regions: list[list[Op]] = []
    for op in ops:
        last = regions[-1][-1] if regions else None
        epilogue = last is not None and last.kind == MATMUL and len(regions[-1]) == 1 and bool(
            {s for s, _ in op.reads} & {s for s, _ in last.writes})
        joins = op.kind == ELEMENTWISE and last is not None and last.phase == op.phase and (
            last.kind == ELEMENTWISE or epilogue)
        if joins:
            regions[-1].append(op)
        else:
            regions.append([op])
    return regions


def _traffic(regions: list[list[Op]]) -> list[int]:
    """HBM bytes of each fused kernel: what it reads from outside plus what it writes for others."""
    readers: dict[int, set[int]] = defaultdict(set)
    for r, region in enumerate(regions):
        for op in region:
            for sid, _ in op.reads:
                readers[sid].add(r)
    moved = []
    for r, region in enumerate(regions):
        written: dict[int, int] = {}
        read: dict[int, int] = {}
        for op in region:
            for sid, n in op.reads:
                if sid not in written:
                    read[sid] = max(read.get(sid, 0), n)
            for sid, n in op.writes:
                written[sid] = max(written.get(sid, 0), n)
        out = sum(n for sid, n in written.items() if readers[sid] - {r} or not readers[sid])
        moved.append(sum(read.values()) + out)
    return moved


def lane_seconds(elements: float, hw: HardwareConfig) -> float:
    """Element-wise work on the lane engines, VectorE and ScalarE sharing it."""
    return elements / (hw.vector_elements_per_s + hw.scalar_elements_per_s)


def hbm_seconds(nbytes: float, hw: HardwareConfig, a: Assumptions) -> float:
    """Bytes through the core's share of HBM at the fitted efficiency."""
    return nbytes / (hw.dma_bytes_per_s * a.hbm_efficiency)


def kernel_cost(ops: list[Op], moved: int, hw: HardwareConfig, a: Assumptions, matmul_dtype: str | None) -> Cost:
    """One kernel running ``ops`` and moving ``moved`` bytes: its slowest resource (TensorE, the
    lane engines, HBM; they overlap) plus the fixed cost of a kernel."""
    tensor = lanes = 0.0
    flops = 0
    for op in ops:
        if op.tensor_flops:
            dtype = matmul_dtype if matmul_dtype and op.kind != ATTENTION else op.dtype
            tensor += op.tensor_flops / (tensor_rate(hw, dtype) * a.matmul_efficiency)
            flops += op.tensor_flops
        lanes += lane_seconds(op.lane_elements, hw)
    busy = {TENSOR_BOUND: tensor, LANE_BOUND: lanes, HBM_BOUND: hbm_seconds(moved, hw, a)}
    bound = max(busy, key=busy.get)
    return Cost({bound: busy[bound], OVERHEAD: a.kernel_overhead_s}, flops, moved, 1)


def _narrow_matmul_reads(region: list[Op], moved: int, matmul_dtype: str | None) -> int:
    """A matrix operator whose operands are quantized to 8 bits reads half its bf16 bytes."""
    if matmul_dtype is None or region[0].kind != MATMUL:
        return moved
    return moved - sum(n for _, n in region[0].reads) // 2


def compiled(ops: list[Op], hw: HardwareConfig, a: Assumptions = Assumptions(),
             matmul_dtype: str | None = None) -> dict[str, Cost]:
    """Estimated cost per phase of ``ops`` as one compiled graph (``matmul_dtype``: the matrix
    operators' operands in that dtype, e.g. ``"float8_e4m3fn"``, instead of their recorded one)."""
    phases: dict[str, Cost] = defaultdict(Cost)
    for region, cost in kernels(ops, hw, a, matmul_dtype):
        phases[region[0].phase] += cost
    return dict(phases)


def kernels(ops: list[Op], hw: HardwareConfig, a: Assumptions = Assumptions(),
            matmul_dtype: str | None = None) -> list[tuple[list[Op], Cost]]:
    """The fused kernels of ``ops`` compiled as one graph, in order, each with its cost."""
    regions = fuse(ops)
    return [(region, kernel_cost(region, _narrow_matmul_reads(region, moved, matmul_dtype), hw, a, matmul_dtype))
            for region, moved in zip(regions, _traffic(regions))]


def eager(ops: list[Op], hw: HardwareConfig, a: Assumptions = Assumptions(),
          matmul_dtype: str | None = None) -> dict[str, Cost]:
    """Estimated cost per phase of ``ops`` run eagerly: one kernel per operator, launched
    asynchronously by a host spending ``host_launch_s`` per launch; the device's idle time
    waiting for launches is charged to :data:`HOST`."""
    phases: dict[str, Cost] = defaultdict(Cost)
    host = device = 0.0
    for op in ops:
        region = [op]
        moved = _narrow_matmul_reads(region, sum(n for _, n in op.reads) + sum(n for _, n in op.writes),
                                     matmul_dtype)
        cost = kernel_cost(region, moved, hw, a, matmul_dtype)
        host += a.host_launch_s
        idle = max(0.0, host - device)
        device += idle + cost.seconds
        phases[op.phase] += cost + Cost({HOST: idle})
    return dict(phases)
