"""The estimated chip timeline: a profile's device kernels re-timed by the cost model for a chip
generation, with a lane per engine.

Each core's kernels run back to back in the order the simulator ran them (as a compiled graph, or
a host that keeps ahead of the device, would run them: the simulator's idle gaps are this
machine's, not the chip's), and each kernel is drawn on the engines that do its work:

- a kernel-language kernel: its recorded instructions, each re-timed for the generation
  (:func:`nki.simulator.cost_model.retimed_seconds`) and scheduled with their data dependencies
  (every engine in issue order, the engines concurrently, an instruction after the ones that
  wrote what it reads: ``RunReport.dependent_schedule``), each with what it waited for;
- a compiled graph: its fused kernels (:func:`.graph_estimate.kernels`), one after another, each
  on the engine that bounds it;
- a native operator or copy: the cost model's estimate on its engine;
- a collective: the collective estimate on the generation's links (lane ``Collective``);
- a CPU fallback: its measured host time on lane ``Host`` (the core waits for it).

Kernels the cost model cannot estimate for a generation (an MX matmul on trn2, an operator
without a formula) are left out of that generation's timeline and counted.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nki.device import LaunchReport
from nki.simulator.cost_model import DMA, TENSOR, VECTOR, HardwareConfig, retimed_seconds

from ..compile.cost import GraphCost
from ..runtime import chips
from . import cost_model, graph_estimate

HOST_LANE, COLLECTIVE_LANE = "Host", "Collective"
_BOUND_ENGINE = {graph_estimate.TENSOR_BOUND: TENSOR, graph_estimate.LANE_BOUND: VECTOR,
                 graph_estimate.HBM_BOUND: DMA}
GENERATIONS = tuple(chips.CHIPS)


@dataclass
class KernelCosting:
    """One recorded device kernel and what the cost model re-times it from."""

    event_id: int            # its SystemProfileEvents row
    core: int
    kernel_name: str
    op_name: str
    kind: str                # native, compiled, kernel-language, collective, fallback
    measured_ns: int
    native: Callable[[HardwareConfig], cost_model.Estimate | None] | None = None
    graph: GraphCost | None = None
    launch: LaunchReport | None = None
    collective: dict | None = None


# (engine, start seconds from the kernel's start, seconds, name, source location, what it waited
# for and how long: an instruction's producer, see RunReport.dependent_schedule)
Activity = tuple[str, float, float, str, str | None, str | None, float]


def _activities(k: KernelCosting, generation: str, logical_nc_config: int) -> list[Activity]:
    hw = cost_model.hardware(generation, logical_nc_config)
    if k.kind == "fallback":
        return [(HOST_LANE, 0.0, k.measured_ns * 1e-9, k.op_name, None, None, 0.0)]
    if k.launch is not None:
        report = k.launch.report
        records = report.instructions
        seconds = [retimed_seconds(r.engine, r.dtype, r.seconds, report.config, hw) for r in records]
        out = []
        for (start, waited, wait), r, took in zip(report.dependent_schedule(seconds), records, seconds):
            cause = None if waited is None else f"{records[waited].engine} {records[waited].opcode} at " \
                                                f"{records[waited].location}"
            out.append((r.engine, start, took, r.opcode, r.location, cause, wait))
        return out
    if k.graph is not None:
        if k.graph.unestimated:
            raise cost_model.CostModelError("; ".join(k.graph.unestimated))
        out, at = [], 0.0
        for region, cost in graph_estimate.kernels(list(k.graph.ops), hw):
            out.append((_BOUND_ENGINE.get(cost.bound, VECTOR), at, cost.seconds,
                        "+".join(op.name for op in region), None, None, 0.0))
            at += cost.seconds
        return out
    if k.collective is not None:
        est = cost_model.estimate_collective(k.collective, generation, logical_nc_config)
        return [(COLLECTIVE_LANE, 0.0, est.seconds, k.kernel_name, None, None, 0.0)]
    est = k.native(hw) if k.native is not None else None
    if est is None:
        raise cost_model.CostModelError(f"no estimate for {k.op_name}")
    return [(est.engine, 0.0, est.seconds, k.op_name, None, None, 0.0)]


def rows(kernels: list[KernelCosting], logical_nc_config: int, start_ns: int) -> tuple[list[dict], dict[str, int]]:
    """The EstimatedActivity rows of ``kernels`` (in measured order) for every generation, from
    ``start_ns``; and per generation how many kernels could not be estimated."""
    out: list[dict] = []
    unestimated: dict[str, int] = {}
    for generation in GENERATIONS:
        core_free: dict[int, float] = {}
        missing = 0
        for k in kernels:
            try:
                activities = _activities(k, generation, logical_nc_config)
            except (cost_model.CostModelError, ValueError):
                missing += 1
                continue
            begin = core_free.get(k.core, 0.0)
            for engine, offset, seconds, name, location, cause, wait in activities:
                start = start_ns + round((begin + offset) * 1e9)
                end = start_ns + round((begin + offset + seconds) * 1e9)
                out.append({"generation": generation, "core": k.core, "engine": engine, "name": name,
                            "start_ts": start, "end_ts": end, "duration_ns": end - start, "event_id": k.event_id,
                            "kernel_name": k.kernel_name, "op_name": k.op_name, "source_location": location,
                            "waited_for": cause, "wait_ns": round(wait * 1e9) if cause else None})
            core_free[k.core] = begin + max((a[1] + a[2] for a in activities), default=0.0)
        unestimated[generation] = missing
    return out, unestimated

