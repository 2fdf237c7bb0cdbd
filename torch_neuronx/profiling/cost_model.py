"""ESTIMATED time of framework operators on the target chip (trn2 default, trn3 selectable).

Every number here is an estimate from a roofline, not a measurement: an operator takes
``max(flops / engine_rate, bytes / hbm_bandwidth) + fixed overhead`` on one NeuronCore, with the
per-core figures of SPEC §1.2 (shared with the kernel-language simulator's cost model):
- matrix operators (those ``torch.utils.flop_counter`` has a formula for: mm, addmm, bmm,
  convolution, attention...) run on TensorE at its rate for the dtype (79 TFLOP/s bf16, 20 fp32,
  158 fp8), with PyTorch's FLOP formulas;
- every other operator runs on VectorE (~1 TFLOP/s), counted as one operation per element
  written (``_foreach_*`` ops: summed over the list);
- bytes moved = the tensors read plus the tensors written, as the shim describes each call's
  kernel while a profiler records (no ``record_shapes`` needed);
- HBM bandwidth per core = chip bandwidth / logical cores per chip (trn2: 2.9 TB/s / 4);
- CPU fallbacks cost their measured host time plus the transfer of their bytes over the
  host link (``HOST_LINK_BYTES_PER_S``, an assumption: the SPEC gives no figure).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from nki.simulator.cost_model import DMA, GENERATIONS, TENSOR, VECTOR, HardwareConfig

HOST_LINK_BYTES_PER_S = 32e9  # assumed PCIe Gen5 x16 effective rate, host <-> device

# TensorE rate class of a dtype (c10 names, as the shim describes tensors); others run at fp32 rate.
_RATE_CLASS: dict[str, str] = {"BFloat16": "bf16", "Half": "bf16", "Float8_e4m3fn": "fp8", "Float8_e5m2": "fp8"}
# Operators whose FLOP formula is another's (the same schema).
_FORMULA_OF: dict[str, str] = {"convolution_overrideable": "convolution"}


def hardware(generation: str = "trn2", cores_per_chip: int = 4) -> HardwareConfig:
    """Per-core figures of a generation, for a chip split into ``cores_per_chip`` logical cores."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown chip generation {generation!r}: expected one of {sorted(GENERATIONS)}")
    return dataclasses.replace(GENERATIONS[generation], logical_cores_per_chip=cores_per_chip)


@dataclass(frozen=True)
class Estimate:
    """Cost-model ESTIMATE of one operator call on one core."""

    flops: int
    bytes_moved: int
    engine: str            # TensorE or VectorE
    seconds: float
    bound: str             # "compute" or "memory"


def _tensors(values: list[Any]) -> list[dict]:
    """The tensors among described arguments, tensor lists flattened."""
    out = []
    for v in values:
        if isinstance(v, dict):
            out.append(v)
        elif isinstance(v, list):
            out.extend(_tensors(v))
    return out


def _as_shapes(value: Any) -> Any:
    """A described argument as FLOP formulas take it: tensors become their torch.Size."""
    if isinstance(value, dict):
        return torch.Size(value["shape"])
    if isinstance(value, list):
        return [_as_shapes(v) for v in value]
    return value


def _flops(name: str, inputs: list[Any], outputs: list[Any]) -> int | None:
    """PyTorch's FLOP formula for a matrix operator, or None if it has none (or it fails)."""
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
    for args in (shapes, [s for s in shapes if isinstance(s, torch.Size)]):
        try:
            return int(formula(*args, out_val=out_val))
        except Exception:  # formulas that need arguments the call does not have
            continue
    return None


def estimate(name: str, call: dict, hw: HardwareConfig) -> Estimate | None:
    """Estimate one call of ``name`` from the shim's description of its tensors
    (``{"inputs": [...], "outputs": [...]}``, see csrc/shim/profiler.h); None without tensors.

    Bytes moved are the tensors read plus the tensors written: the outputs, or for an in-place
    operator that returns nothing (``_foreach_add_``) its first argument. Operators without a FLOP
    formula do one VectorE operation per element written."""
    inputs, outputs = call["inputs"], call["outputs"]
    read = _tensors(inputs)
    written = _tensors(outputs) or _tensors(inputs[:1])
    if not read and not written:
        return None
    bytes_moved = sum(t["bytes"] for t in read + written)
    flops = _flops(name, inputs, outputs)
    if flops is not None:
        rate_class = _RATE_CLASS.get((read or written)[0]["dtype"], "fp32")
        rate = {"fp32": hw.tensor_flops_fp32, "fp8": hw.tensor_flops_fp8}.get(rate_class, hw.tensor_flops_bf16)
        engine = TENSOR
    else:
        flops = sum(math.prod(t["shape"]) for t in written)
        rate, engine = hw.vector_flops, VECTOR
    compute = flops / rate
    memory = bytes_moved / hw.dma_bytes_per_s
    overhead = hw.compute_overhead_cycles / hw.clock_hz
    return Estimate(flops, bytes_moved, engine, max(compute, memory) + overhead,
                    "compute" if compute >= memory else "memory")


def transfer_seconds(bytes_moved: int) -> float:
    """ESTIMATED host <-> device transfer time of a CPU fallback's tensors."""
    return bytes_moved / HOST_LINK_BYTES_PER_S


__all__ = ["Estimate", "estimate", "hardware", "transfer_seconds", "HOST_LINK_BYTES_PER_S", "TENSOR",
           "VECTOR", "DMA"]
