"""ESTIMATED time of framework operators on the target chip (trn2 default, trn3 selectable).

Every number here is an estimate from a roofline, not a measurement: an operator takes
``max(flops / engine_rate, bytes / hbm_bandwidth) + fixed overhead`` on one NeuronCore, with the
per-core figures of SPEC §1.2 (shared with the kernel-language simulator's cost model):
- matrix operators (those ``torch.utils.flop_counter`` has a formula for: mm, addmm, bmm,
  convolution, attention...) run on TensorE at its rate for the dtype (79 TFLOP/s bf16, 20 fp32,
  158 fp8), with PyTorch's FLOP formulas;
- every other operator runs on VectorE (~1 TFLOP/s), counted as one operation per element of
  its largest tensor;
- bytes moved = the input tensors plus an output the size of the largest input;
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

# Kineto's dtype names -> (bytes per element, TensorE rate class).
_DTYPES: dict[str, tuple[int, str]] = {
    "float": (4, "fp32"), "double": (8, "fp32"), "c10::Half": (2, "bf16"),
    "c10::BFloat16": (2, "bf16"), "long int": (8, "fp32"), "int": (4, "fp32"),
    "short int": (2, "fp32"), "signed char": (1, "fp8"), "unsigned char": (1, "fp8"),
    "bool": (1, "fp8"), "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"),
}


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


def _flops(name: str, shapes: list[list[int]], concrete: list[Any]) -> int | None:
    """PyTorch's FLOP formula for a matrix operator, or None if it has none (or it fails)."""
    packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    formula = flop_registry.get(packet) if packet is not None else None
    if formula is None:
        return None
    # Formulas take the tensor shapes positionally, some also later arguments (convolution's
    # `transposed`), others no more (addmm's beta/alpha): try with every argument, then shapes only.
    full = [torch.Size(s) if s else c for s, c in zip(shapes, concrete + [None] * len(shapes))]
    for args in (full, [torch.Size(s) for s in shapes if s]):
        try:
            return int(formula(*args, out_val=None))
        except Exception:  # formulas that need the output shape or arguments we lack
            continue
    return None


def estimate(name: str, shapes: list[list[int]], dtypes: list[str], concrete: list[Any] | None,
             hw: HardwareConfig) -> Estimate | None:
    """Estimate one call of ``name`` from its recorded input shapes/dtypes (None: no shapes)."""
    tensors = [(math.prod(s), _DTYPES.get(d, (4, "fp32"))) for s, d in zip(shapes, dtypes) if s]
    if not tensors:
        return None
    sizes = [n * info[0] for n, info in tensors]
    bytes_moved = sum(sizes) + max(sizes)
    flops = _flops(name, shapes, list(concrete or []))
    if flops is not None:
        rate_class = tensors[0][1][1]
        rate = {"fp32": hw.tensor_flops_fp32, "fp8": hw.tensor_flops_fp8}.get(rate_class, hw.tensor_flops_bf16)
        engine = TENSOR
    else:
        flops = max(n for n, _ in tensors)
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
