"""ESTIMATED time of framework operators on the target chip (trn2 default, trn3 selectable).

Every number here is an estimate from a roofline, not a measurement: an operator is one kernel
costed as the whole-model estimator costs its kernels (:func:`.graph_estimate.kernel_cost`:
``max(TensorE, lane engines, HBM) + fixed cost``, at the fitted efficiencies of
:class:`.graph_estimate.Assumptions`) on one LOGICAL NeuronCore, whose figures are its physical
cores' summed engine rates and HBM share (:func:`hardware`, from the chip facts of
:mod:`torch_neuronx.runtime.chips`):
- matrix operators (those ``torch.utils.flop_counter`` has a formula for: mm, addmm, bmm,
  convolution, attention...) run on TensorE at its rate for the dtype (bf16/fp16, fp32, fp8),
  with PyTorch's FLOP formulas; a formula that fails leaves the operator UNESTIMATED
  (:class:`CostModelError`, with the reason) rather than guessed;
- every other operator runs on the lane engines (VectorE and ScalarE), counted as one operation
  per element written (``_foreach_*`` ops: summed over the list) at their element rates
  (data-path width x clock, :mod:`torch_neuronx.runtime.chips`);
- bytes moved = the tensors read plus the tensors written, as the shim describes each call's
  kernel while a profiler records (no ``record_shapes`` needed);
- copies run on the DMA engines: host <-> device moves the source's bytes over the host link
  (``HOST_LINK_BYTES_PER_S``, an assumption: no published figure), device to device (same
  core or core to core) reads and writes them at HBM bandwidth;
- CPU fallbacks cost their measured host time plus the transfer of their bytes over the
  host link (their own copies are not described, so not counted twice);
- collectives run on the chip-to-chip interconnect (NeuronLink) as rings: the bus bytes through
  the core's share of the chip's link bandwidth plus an assumed latency per ring step, and
  between instances hierarchically over EFA (:func:`collective_seconds`);
- compiled graphs: their fused kernels (the graph's operator trace recorded at compile time,
  :mod:`torch_neuronx.compile.cost`, cut and costed by :mod:`.graph_estimate`, the whole-model
  estimator's code path).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from nki.simulator.cost_model import DMA, TENSOR, VECTOR, HardwareConfig, tensor_rate

from ..compile.cost import GraphCost, scaled_matmul_cost
from ..distributed.traffic import traffic
from ..runtime.chips import logical_core
from . import graph_estimate
from .graph_estimate import Assumptions, Cost
from .op_trace import ELEMENTWISE, MATMUL, Op

HOST_LINK_BYTES_PER_S = 32e9  # assumed PCIe Gen5 x16 effective rate, host <-> device
# Latency of one step of a collective (a hop between chips and its synchronization) over
# NeuronLink and between instances over EFA: no published figure; assumptions fitted to published
# decode latencies (graph_estimate.Assumptions, docs/cost-model.md).
COLLECTIVE_STEP_SECONDS = Assumptions().link_step_s
EFA_STEP_SECONDS = Assumptions().efa_step_s
INTERCONNECT, NETWORK = "NeuronLink", "EFA"  # the links collectives are estimated on

# Copy kernels (csrc/shim/tensor_kernels.cpp) by direction: True over the host link, False in HBM.
_COPY_OVER_HOST_LINK: dict[str, bool] = {"(host to device)": True, "(device to host)": True,
                                         "(device to device)": False, "(core to core)": False}
# Operators whose FLOP formula is another's (the same schema).
_FORMULA_OF: dict[str, str] = {"convolution_overrideable": "convolution"}


def hardware(generation: str = "trn2", logical_nc_config: int = 2) -> HardwareConfig:
    """Figures of one logical core of ``generation`` made of ``logical_nc_config`` physical cores
    (the runtime's NEURON_LOGICAL_NC_CONFIG, default 2)."""
    return HardwareConfig.of(generation, logical_nc_config)


class CostModelError(ValueError):
    """An operator the cost model cannot estimate; the message says why."""


@dataclass(frozen=True)
class Estimate:
    """Cost-model ESTIMATE of one operator call on one core."""

    flops: int             # TensorE: matrix FLOPs; VectorE: one per element written; DMA: 0
    bytes_moved: int
    engine: str            # TensorE, VectorE or DMA
    seconds: float
    bound: str             # "compute" or "memory"
    tensor_peak_seconds: float = 0.0  # its matrix FLOPs at TensorE's peak for their dtype (MFU)


def described_tensors(values: list[Any]) -> list[dict]:
    """The tensors among described arguments, tensor lists flattened."""
    out = []
    for v in values:
        if isinstance(v, dict):
            out.append(v)
        elif isinstance(v, list):
            out.extend(described_tensors(v))
    return out


def _as_shapes(value: Any) -> Any:
    """A described argument as FLOP formulas take it: tensors become their torch.Size."""
    if isinstance(value, dict):
        return torch.Size(value["shape"])
    if isinstance(value, list):
        return [_as_shapes(v) for v in value]
    return value


def _dma(bytes_moved: int, seconds: float, hw: HardwareConfig) -> Estimate:
    """A copy on the DMA engines: its transfer plus the fixed cost of a DMA."""
    return Estimate(0, bytes_moved, DMA, seconds + hw.dma_overhead_s, "memory", 0.0)


def _flops(name: str, inputs: list[Any], outputs: list[Any]) -> int | None:
    """PyTorch's FLOP formula for a matrix operator, None if it has none; CostModelError if it
    has one that cannot count this call (costing it as elementwise would hide its FLOPs)."""
    op = name.removeprefix("aten::").split(".")[0]
    packet = getattr(torch.ops.aten, _FORMULA_OF.get(op, op), None)
    formula = flop_registry.get(packet) if packet is not None else None
    if formula is None:
        return None
    out = [_as_shapes(o) for o in outputs]
    out_val = out[0] if len(out) == 1 else tuple(out)
    # Some formulas take every argument (convolution's `transposed`), others the tensors only
    # (addmm has no parameters for beta/alpha): try both.
    shapes = [_as_shapes(v) for v in inputs]
    error: Exception | None = None
    for args in (shapes, [s for s in shapes if isinstance(s, torch.Size)]):
        try:
            return int(formula(*args, out_val=out_val))
        except Exception as e:  # the first form may not match this formula's parameters
            error = e
    raise CostModelError(f"FLOP formula of {op} failed: {type(error).__name__}: {error}")


def _from_cost(cost: Cost, flops: int, peak_seconds: float) -> Estimate:
    """The estimate of kernels the graph estimator costed (:mod:`.graph_estimate`)."""
    compute = cost.bound in (graph_estimate.TENSOR_BOUND, graph_estimate.LANE_BOUND)
    return Estimate(flops, cost.bytes_moved, TENSOR if cost.tensor_flops else VECTOR, cost.seconds,
                    "compute" if compute else "memory", peak_seconds)


def estimate(name: str, call: dict, hw: HardwareConfig, assumptions: Assumptions | None = None) -> Estimate | None:
    """Estimate one call of ``name`` from the shim's description of its tensors
    (``{"inputs": [...], "outputs": [...]}``, see csrc/shim/profiler/profiler.h); None without tensors.

    The call is one kernel costed as the whole-model estimator costs one
    (:func:`.graph_estimate.kernel_cost`, the fitted assumptions): bytes moved are the tensors
    read plus the tensors written (the outputs, or for an in-place operator that returns nothing,
    ``_foreach_add_``, its first argument); operators without a FLOP formula do one lane-engine
    operation per element written. Raises CostModelError when the operator's FLOP formula fails."""
    inputs, outputs = call["inputs"], call["outputs"]
    read = described_tensors(inputs)
    written = described_tensors(outputs) or described_tensors(inputs[:1])
    if not read and not written:
        return None
    bytes_moved = sum(t["bytes"] for t in read + written)
    dtype = (read or written)[0]["dtype"]
    described = [(t["shape"], t["dtype"]) for t in read]
    scaled = scaled_matmul_cost(name, described, written[0]["shape"]) if written else None
    flops, dtype = scaled if scaled is not None else (_flops(name, inputs, outputs), dtype)
    tensors = lambda ts: tuple((i, t["bytes"]) for i, t in enumerate(ts))  # noqa: E731
    if flops is not None:
        op = Op(name, MATMUL, flops, 0, dtype, tensors(read), tensors(written), "forward")
        peak = flops / tensor_rate(hw, dtype)
    else:
        flops = sum(math.prod(t["shape"]) for t in written)
        op = Op(name, ELEMENTWISE, 0, flops, dtype, tensors(read), tensors(written), "forward")
        peak = 0.0
    cost = graph_estimate.kernel_cost([op], bytes_moved, hw, assumptions or Assumptions(), None)
    return _from_cost(cost, flops, peak)


def estimate_copy(kernel: str, call: dict, hw: HardwareConfig) -> Estimate | None:
    """Estimate a copy kernel (``aten::_copy_from (<direction>)``) described as
    ``{"inputs": [source], "outputs": [destination]}`` on the DMA engines; None for other kernels.

    Host <-> device moves the source's bytes over the host link (a converting copy converts on
    the far side); device to device reads the source and writes the destination in HBM."""
    over_link = next((v for k, v in _COPY_OVER_HOST_LINK.items() if kernel.endswith(k)), None)
    if over_link is None:
        return None
    source = sum(t["bytes"] for t in described_tensors(call["inputs"]))
    if over_link:
        return _dma(source, transfer_seconds(source), hw)
    moved = source + sum(t["bytes"] for t in described_tensors(call["outputs"]))
    return _dma(moved, moved / hw.dma_bytes_per_s, hw)


def estimate_compiled(cost: GraphCost, hw: HardwareConfig, assumptions: Assumptions | None = None) -> Estimate:
    """Estimate one execution of a compiled graph from its fused kernels, as the whole-model
    estimator runs a compiled graph (:func:`.graph_estimate.compiled` over the graph's operator
    trace, :mod:`torch_neuronx.compile.cost`). Raises CostModelError when a FLOP formula failed on
    one of its nodes."""
    if cost.unestimated:
        raise CostModelError("; ".join(cost.unestimated))
    total = sum(graph_estimate.compiled(list(cost.ops), hw, assumptions or Assumptions()).values(), Cost())
    flops = sum(cost.matmul_flops.values())
    peak = sum(n / tensor_rate(hw, dtype) for dtype, n in cost.matmul_flops.items())
    return _from_cost(total, flops, peak)


@dataclass(frozen=True)
class Fabric:
    """The links a collective's group uses: each rank's share of its chip's NeuronLink inside an
    instance and of its instance's EFA between instances, with the assumed latency of one ring
    step on each."""

    ranks_per_instance: int
    link_bytes_per_s: float
    efa_bytes_per_s: float = 0.0
    link_step_s: float = COLLECTIVE_STEP_SECONDS
    efa_step_s: float = EFA_STEP_SECONDS


def fabric(generation: str, logical_nc_config: int, ranks_per_instance: int, efa_bytes_per_s: float = 0.0,
           assumptions: Assumptions | None = None) -> Fabric:
    """The fabric of a group with ``ranks_per_instance`` logical cores (one rank each) per instance
    of ``generation``'s chips, the instance having ``efa_bytes_per_s`` of EFA: each rank's share of
    its chip's NeuronLink at the fitted ``link_efficiency`` (nccom-test's measured bus bandwidths are
    a third of the link share), and its share of the EFA (assumed sustained)."""
    core = logical_core(generation, logical_nc_config)
    a = assumptions or Assumptions()
    return Fabric(ranks_per_instance, core.interconnect_bytes_per_s * a.link_efficiency,
                  efa_bytes_per_s / max(ranks_per_instance, 1), a.link_step_s, a.efa_step_s)


def latency_steps(collective: str, ranks: int) -> int:
    """Link latencies one collective pays on ``ranks``: recursive halving and doubling (Rabenseifner's
    algorithm, which moves a ring's bus bytes) takes ``log2(n)`` steps per pass, an all-reduce two
    passes; all-to-all exchanges pairwise in ``n - 1`` steps; a point-to-point send one."""
    passes = math.ceil(math.log2(ranks)) if ranks > 1 else 0
    if collective == "all_reduce":
        return 2 * passes
    if collective in ("all_to_all", "all_to_all_single"):
        return ranks - 1
    return passes if traffic(collective, ranks).ring_steps > 1 else 1


def _pass(collective: str, ranks: int, nbytes: float, bytes_per_s: float, step_s: float) -> float:
    """One level of a collective: its latency steps plus its bus bytes through each rank's link."""
    if ranks <= 1:
        return 0.0
    return latency_steps(collective, ranks) * step_s + nbytes * traffic(collective, ranks).bus_factor / bytes_per_s


def collective_seconds(collective: str, nbytes: float, ranks: int, fab: Fabric) -> dict[str, float]:
    """ESTIMATED seconds of ``collective`` (a ``torch.distributed`` name) of ``nbytes`` (nccl-tests'
    size) over ``ranks``, by link: each level moves a ring's bus bytes in :func:`latency_steps`
    steps. Inside one instance over NeuronLink; across instances hierarchical, as the Neuron
    collectives run it: the collective inside each instance on the full size, then between the
    instances (one rank of each instance per group, ``ranks_per_instance`` groups side by side) on
    the ``1 / ranks_per_instance`` share each rank holds, over its share of the EFA."""
    inside = min(ranks, fab.ranks_per_instance)
    seconds = {INTERCONNECT: _pass(collective, inside, nbytes, fab.link_bytes_per_s, fab.link_step_s)}
    instances = -(-ranks // inside)
    if instances > 1:
        if not fab.efa_bytes_per_s:
            raise CostModelError(f"{collective} across {instances} instances: the instance has no EFA network")
        seconds[NETWORK] = _pass(collective, instances, nbytes / inside, fab.efa_bytes_per_s, fab.efa_step_s)
    return seconds


def estimate_collective(call: dict, generation: str, logical_nc_config: int) -> Estimate:
    """ESTIMATED time of one collective the backend describes (``collective``, ``group_size``,
    ``bytes``; torch_neuronx/distributed) on ``generation``'s NeuronLink: each rank sends its bus
    share of the bytes through its logical core's share of its chip's link, plus
    :data:`COLLECTIVE_STEP_SECONDS` per latency step (:func:`latency_steps`). All ranks on
    different chips of one instance is the assumption (ranks of one chip would share no link)."""
    ranks = call["group_size"]
    seconds = collective_seconds(call["collective"], call["bytes"], ranks,
                                 fabric(generation, logical_nc_config, ranks))[INTERCONNECT]
    through_link = int(call["bytes"] * traffic(call["collective"], ranks).bus_factor)
    return Estimate(0, through_link, INTERCONNECT, seconds, "interconnect")


def transfer_seconds(bytes_moved: int) -> float:
    """ESTIMATED time to move ``bytes_moved`` over the host link."""
    return bytes_moved / HOST_LINK_BYTES_PER_S


__all__ = ["CostModelError", "Estimate", "Fabric", "collective_seconds", "estimate", "estimate_collective",
           "estimate_copy", "estimate_compiled", "fabric", "hardware",
           "transfer_seconds", "HOST_LINK_BYTES_PER_S", "TENSOR", "VECTOR", "DMA"]
