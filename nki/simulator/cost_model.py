"""Per-core hardware figures and the per-instruction cost estimates derived from them.

Every figure here is an ESTIMATE used for relative comparisons, not a cycle-accurate model:
- TensorE is a 128x128 PE array: a matmul streams its N moving columns through the array, so its
  time is ``2*128*128*N / rate(dtype)`` whatever K and M are (small tiles waste the array).
  rate = 79 TFLOP/s bf16/fp16, 20 TFLOP/s fp32, 158 TFLOP/s fp8 (per core).
- VectorE / ScalarE / GpSimd have one lane per partition: an instruction on a [P, F] tile costs
  ``128*F*ops_per_element / rate`` (idle partitions are not free). VectorE ~1 TFLOP/s fp32
  (published); ScalarE is assumed to match VectorE; GpSimd (8 general cores) is assumed at 0.25.
- DMA: the chip HBM bandwidth shared by the logical cores of a chip (trn2: 2.9 TB/s / 4 logical
  cores = 725 GB/s per core), the same rate is used for SBUF<->SBUF copies.
- Fixed per-instruction overheads: 64 engine cycles at 1.4 GHz (~46 ns) on compute engines
  (instruction issue + semaphore wait); per DMA instruction ~2 us of fixed latency spread over
  the 16 DMA queues of a core, i.e. 0.125 us of DMA busy time. Kernel launch cost is not included (the runtime adds it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import FLOAT8, float32

TENSOR, VECTOR, SCALAR, GPSIMD, DMA = "TensorE", "VectorE", "ScalarE", "GpSimd", "DMA"
ENGINES = (TENSOR, VECTOR, SCALAR, GPSIMD, DMA)


@dataclass(frozen=True)
class HardwareConfig:
    """One NeuronCore of a generation; capacities are enforced by the simulator's rules."""

    name: str = "trn2"
    partitions: int = 128
    sbuf_bytes_per_partition: int = 224 * 1024      # 28 MiB / 128 partitions
    psum_bytes_per_partition: int = 16 * 1024       # 2 MiB / 128 partitions
    psum_bank_bytes: int = 2 * 1024                 # 8 banks of 2 KiB per partition
    contraction_max: int = 128                      # PE array rows
    stationary_fmax: int = 128                      # PE array columns
    moving_fmax: int = 512
    tensor_flops_bf16: float = 79e12
    tensor_flops_fp32: float = 20e12
    tensor_flops_fp8: float = 158e12
    vector_flops: float = 1e12
    scalar_flops: float = 1e12
    gpsimd_flops: float = 0.25e12
    hbm_bytes_per_s_chip: float = 2.9e12
    logical_cores_per_chip: int = 4
    clock_hz: float = 1.4e9
    compute_overhead_cycles: int = 64
    dma_overhead_s: float = 2e-6 / 16

    @property
    def psum_banks(self) -> int:
        return self.psum_bytes_per_partition // self.psum_bank_bytes

    @property
    def dma_bytes_per_s(self) -> float:
        return self.hbm_bytes_per_s_chip / self.logical_cores_per_chip


TRN2 = HardwareConfig()
TRN3 = HardwareConfig(name="trn3", sbuf_bytes_per_partition=256 * 1024,  # 32 MiB / 128
                      hbm_bytes_per_s_chip=4.9e12)
GENERATIONS = {"trn2": TRN2, "trn3": TRN3}


def tensor_rate(config: HardwareConfig, dtype: np.dtype) -> float:
    if dtype == float32:
        return config.tensor_flops_fp32
    if dtype in FLOAT8:
        return config.tensor_flops_fp8
    return config.tensor_flops_bf16


def matmul_seconds(config: HardwareConfig, moving_free: int, dtype: np.dtype) -> float:
    array_flops = 2 * config.partitions * config.stationary_fmax * moving_free
    return array_flops / tensor_rate(config, dtype) + _overhead(config)


def lane_seconds(config: HardwareConfig, engine: str, free_elements: int,
                 ops_per_element: float = 1.0) -> float:
    rate = {VECTOR: config.vector_flops, SCALAR: config.scalar_flops,
            GPSIMD: config.gpsimd_flops}[engine]
    return config.partitions * free_elements * ops_per_element / rate + _overhead(config)


def dma_seconds(config: HardwareConfig, nbytes: int) -> float:
    return nbytes / config.dma_bytes_per_s + config.dma_overhead_s


def _overhead(config: HardwareConfig) -> float:
    return config.compute_overhead_cycles / config.clock_hz
