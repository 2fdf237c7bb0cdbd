"""Per-core hardware figures of the kernel simulator and the per-instruction cost estimates derived from them.

The figures are read from the chip facts (:mod:`torch_neuronx.runtime.chips`, which cites their
sources); a :class:`HardwareConfig` is ONE PHYSICAL NeuronCore unless built for a logical core
(:meth:`HardwareConfig.of`). Every cost here is an ESTIMATE for relative comparisons, not a
cycle-accurate model:
- TensorE is a 128x128 PE array: a matmul streams its N moving columns through the array, so its
  time is ``2*128*128*N / rate(dtype)`` whatever K and M are (small tiles waste the array).
- VectorE / ScalarE / GpSimd stream each input tile of an instruction through their data path
  once: ``128*F*tile_inputs / elements_per_s`` for a [P, F] tile (the published data-path width x
  clock; idle partitions are not free, chained operations of one instruction are one pass).
- DMA moves bytes at the core's share of the chip's HBM bandwidth (also used for SBUF<->SBUF).
- Fixed per-instruction overheads (ASSUMED, not published): 64 cycles of the ScalarE/GpSimd
  clock on compute engines (instruction issue + semaphore wait); per DMA instruction ~2 us of
  fixed latency spread over the 16 DMA queues of a core, i.e. 0.125 us of DMA busy time.
  Kernel launch cost is not included (the runtime adds it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torch_neuronx.runtime.chips import BF16, CHIPS, FP8, FP32, MX, TRN2 as _TRN2, logical_core

TENSOR, VECTOR, SCALAR, GPSIMD, DMA = "TensorE", "VectorE", "ScalarE", "GpSimd", "DMA"
ENGINES = (TENSOR, VECTOR, SCALAR, GPSIMD, DMA)

_CORE = logical_core(_TRN2)  # the defaults: one trn2 physical core


@dataclass(frozen=True)
class HardwareConfig:
    """One NeuronCore of a generation; capacities are enforced by the simulator's rules."""

    name: str = "trn2"
    partitions: int = _TRN2.partitions
    sbuf_bytes_per_partition: int = _TRN2.sbuf_bytes // _TRN2.partitions
    psum_bytes_per_partition: int = _TRN2.psum_bytes // _TRN2.partitions
    psum_bank_bytes: int = 2 * 1024                 # 8 banks of 2 KiB per partition (NKI ISA limit)
    contraction_max: int = 128                      # PE array rows
    stationary_fmax: int = 128                      # PE array columns
    moving_fmax: int = 512                          # NKI ISA tile limit
    tensor_flops_bf16: float = _CORE.tensor_flops[BF16]
    tensor_flops_fp32: float = _CORE.tensor_flops[FP32]
    tensor_flops_fp8: float = _CORE.tensor_flops[FP8]
    tensor_flops_mx: float = 0.0                    # MXFP8/MXFP4: NeuronCore-v4 only
    vector_flops: float = _CORE.vector_flops
    scalar_flops: float = _CORE.scalar_flops
    gpsimd_flops: float = _CORE.gpsimd_flops
    # Element-wise throughput (elements/s) of the lane engines: what their instructions cost.
    vector_elements_per_s: float = _CORE.lane_elements_per_s["vector"]
    scalar_elements_per_s: float = _CORE.lane_elements_per_s["scalar"]
    gpsimd_elements_per_s: float = _CORE.lane_elements_per_s["gpsimd"]
    dma_bytes_per_s: float = _CORE.hbm_bytes_per_s
    clock_hz: float = _TRN2.engine_clock_hz["scalar"]  # cycles are counted at this clock
    compute_overhead_cycles: int = 64
    dma_overhead_s: float = 2e-6 / 16

    @property
    def psum_banks(self) -> int:
        return self.psum_bytes_per_partition // self.psum_bank_bytes

    @classmethod
    def of(cls, generation: str, logical_nc_config: int = 1) -> HardwareConfig:
        """A core of ``generation`` grouping ``logical_nc_config`` physical cores: their summed
        engine rates and HBM share (capacities per partition stay a physical core's)."""
        if generation not in CHIPS:
            raise ValueError(f"unknown chip generation {generation!r}: expected one of {sorted(CHIPS)}")
        core = logical_core(generation, logical_nc_config)
        chip = core.chip
        return cls(name=generation, partitions=chip.partitions,
                   sbuf_bytes_per_partition=chip.sbuf_bytes // chip.partitions,
                   psum_bytes_per_partition=chip.psum_bytes // chip.partitions,
                   tensor_flops_bf16=core.tensor_flops[BF16], tensor_flops_fp32=core.tensor_flops[FP32],
                   tensor_flops_fp8=core.tensor_flops[FP8], tensor_flops_mx=core.tensor_flops.get(MX, 0.0),
                   vector_flops=core.vector_flops,
                   scalar_flops=core.scalar_flops, gpsimd_flops=core.gpsimd_flops,
                   vector_elements_per_s=core.lane_elements_per_s["vector"],
                   scalar_elements_per_s=core.lane_elements_per_s["scalar"],
                   gpsimd_elements_per_s=core.lane_elements_per_s["gpsimd"],
                   dma_bytes_per_s=core.hbm_bytes_per_s, clock_hz=chip.engine_clock_hz["scalar"])


TRN1 = HardwareConfig.of("trn1")
TRN2 = HardwareConfig.of("trn2")
TRN3 = HardwareConfig.of("trn3")
GENERATIONS = {"trn1": TRN1, "trn2": TRN2, "trn3": TRN3}

# TensorE rate class of a dtype by lower-cased name: numpy/ml_dtypes and torch names ("bfloat16",
# "float8_e4m3fn") and the c10 names the shim describes ("BFloat16", "Half", "Float").
_HALF = ("bfloat16", "float16", "half")


def tensor_rate(config: HardwareConfig, dtype: np.dtype | str) -> float:
    """TensorE FLOP/s for matmul inputs of ``dtype``: microscaling formats (``"mx"``, the packed
    ``*_x4`` MXFP8 and fp4 types) at the MX rate where the generation has one, fp8 types at the fp8
    rate, 16-bit floats at the bf16 rate, anything else (fp32, integers: no integer TensorE path)
    at the fp32 rate."""
    name = (dtype if isinstance(dtype, str) else np.dtype(dtype).name).lower()
    if name == MX or name.endswith("_x4") or name.startswith("float4"):
        if not config.tensor_flops_mx:
            raise ValueError(f"{config.name} has no microscaling (MX) matmul: MXFP8/MXFP4 need trn3 "
                             f"(NeuronCore-v4); use fp8 or bf16 on {config.name}")
        return config.tensor_flops_mx
    if name.startswith("float8") or name == FP8:
        return config.tensor_flops_fp8
    return config.tensor_flops_bf16 if name in _HALF else config.tensor_flops_fp32


def matmul_seconds(config: HardwareConfig, moving_free: int, dtype: np.dtype) -> float:
    array_flops = 2 * config.partitions * config.stationary_fmax * moving_free
    return array_flops / tensor_rate(config, dtype) + _overhead(config)


def transpose_flops(partitions: int, free: int) -> int:
    """FLOPs TensorE performs for a [P, F] transpose: a matmul against a [P, P] identity."""
    return 2 * partitions * partitions * free


def lane_seconds(config: HardwareConfig, engine: str, free_elements: int, tile_inputs: int = 1) -> float:
    """An element-wise instruction over ``free_elements`` per partition streams each of its
    ``tile_inputs`` input tiles through the engine's data path once, whatever operations it
    chains (a two-step ``tensor_scalar`` is one pass). The published width counts elements
    read ("input/output" elements per cycle), so ``tensor_tensor``, which reads two tiles, takes
    twice the cycles of a one-input instruction of the same shape (our reading of the table;
    the guides do not say it in words)."""
    rate = {VECTOR: config.vector_elements_per_s, SCALAR: config.scalar_elements_per_s,
            GPSIMD: config.gpsimd_elements_per_s}[engine]
    return config.partitions * free_elements * max(tile_inputs, 1) / rate + _overhead(config)


def dma_seconds(config: HardwareConfig, nbytes: int) -> float:
    return nbytes / config.dma_bytes_per_s + config.dma_overhead_s


def _overhead(config: HardwareConfig) -> float:
    return config.compute_overhead_cycles / config.clock_hz


def _engine_rate(config: HardwareConfig, engine: str, dtype: str) -> float:
    if engine == TENSOR:
        return tensor_rate(config, dtype)
    if engine == DMA:
        return config.dma_bytes_per_s
    return {VECTOR: config.vector_elements_per_s, SCALAR: config.scalar_elements_per_s,
            GPSIMD: config.gpsimd_elements_per_s}[engine]


def retimed_seconds(engine: str, dtype: str, seconds: float, source: HardwareConfig, target: HardwareConfig) -> float:
    """An instruction's estimate on ``target`` from its estimate on ``source``: every cost above is
    the instruction's work (which no generation changes) over its engine's rate, plus the fixed
    overhead. Raises ValueError for an MX matmul on a generation without MX."""
    fixed = (lambda c: c.dma_overhead_s) if engine == DMA else _overhead  # noqa: E731
    work = (seconds - fixed(source)) * _engine_rate(source, engine, dtype)
    return work / _engine_rate(target, engine, dtype) + fixed(target)
