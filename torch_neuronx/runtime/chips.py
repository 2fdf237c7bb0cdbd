"""Published facts of each simulated Trainium generation: the ONE place they are written down.

Every other module (topology, the kernel simulator's and the profiler's cost models, the compile
cost counter, the whole-model estimator) reads them from here. Sources: :data:`SOURCES` (AWS
Neuron documentation, aws-neuron/aws-neuron-sdk), cited by key next to each figure.

Engine rates are per PHYSICAL NeuronCore and dense (structured sparsity is not modelled). A
logical core (``NEURON_LOGICAL_NC_CONFIG``) groups physical cores and has their summed compute
and bandwidth: :func:`logical_core` derives every per-core figure from these facts.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

MiB, GiB = 1 << 20, 1 << 30

SOURCES: Mapping[str, str] = MappingProxyType({
    "[T1]": "about-neuron/arch/neuron-hardware/trainium.rst (Trainium chip, trn1)",
    "[N2]": "about-neuron/arch/neuron-hardware/neuron-core-v2.rst (NeuronCore-v2, trn1 and inf2)",
    "[K1]": "nki/guides/architecture/trainium_inferentia2_arch.rst (Trainium/Inferentia2 Architecture Guide for NKI)",
    "[T2]": "about-neuron/arch/neuron-hardware/trainium2.rst (Trainium2 chip)",
    "[T3]": "about-neuron/arch/neuron-hardware/trainium3.rst (Trainium3 chip)",
    "[N3]": "about-neuron/arch/neuron-hardware/neuron-core-v3.rst (NeuronCore-v3)",
    "[N4]": "about-neuron/arch/neuron-hardware/neuron-core-v4.rst (NeuronCore-v4)",
    "[K2]": "nki/guides/architecture/trainium2_arch.rst (Trainium2 Architecture Guide for NKI)",
    "[K3]": "nki/guides/architecture/trainium3_arch.rst (Trainium3 Architecture Guide for NKI)",
    "[E51]": "compiler/error-codes/EVRF051.rst (NCC_EVRF051: F8E4M3FN is not supported on TRN1/TRN2)",
    "[P1]": "github.com/tsaol/aws-gpu data/*_instances.js (instances.vantage.sh's AWS on-demand prices)",
})

# TensorE rate classes: bf16 also covers fp16 and tf32; fp8 is plain (per-tensor/per-row scaled)
# FP8; mx is the microscaling formats (MXFP8/MXFP4, blocks of 32 with E8M0 scales), which only
# NeuronCore-v4 has. INT8 has no integer TensorE path (converted to FP32): the fp32 rate.
BF16, FP32, FP8, MX = "bf16", "fp32", "fp8", "mx"


@dataclass(frozen=True)
class Chip:
    """One Trainium generation: per-physical-core engine figures and per-chip memory/interconnect."""

    name: str
    neuron_core: int  # NeuronCore-v<neuron_core>: the instruction set's generation
    physical_cores: int
    # Per physical NeuronCore.
    tensor_flops: Mapping[str, float]      # dense TensorE FLOP/s by rate class (BF16, FP32, FP8, MX)
    tensor_float8: tuple[str, ...]         # the torch float8 dtypes TensorE multiplies
    vector_flops: float                    # VectorE FP32 FLOP/s
    scalar_flops: float                    # ScalarE FP32 FLOP/s
    gpsimd_flops: float                    # GpSimd FLOP/s (ASSUMED: not published)
    engine_clock_hz: Mapping[str, float]   # "tensor", "vector", "scalar", "gpsimd"
    # Elements an element-wise instruction moves per cycle ("vector", "scalar", "gpsimd") for
    # 32-bit data: the data-path width of the architecture guides' "Compute Engine
    # Specifications". The wider BF16/FP16 paths (the VectorE performance mode, which the
    # hardware enables only for some instructions with SBUF operands) are not modelled.
    lane_elements_per_cycle: Mapping[str, float]
    partitions: int                        # SBUF/PSUM partitions = PE array rows
    sbuf_bytes: int
    psum_bytes: int
    # Per chip.
    hbm_bytes: int
    hbm_bytes_per_s: float
    dma_bytes_per_s: float
    interconnect_bytes_per_s: float        # NeuronLink, chip to chip
    sources: tuple[str, ...] = ()          # the SOURCES keys its figures come from

    @property
    def default_logical_nc_config(self) -> int:
        """Physical cores per logical core by default (``NEURON_LOGICAL_NC_CONFIG``): logical
        NeuronCores begin with Trainium2; a trn1 core is one NeuronCore-v2."""
        return 1 if self.neuron_core == 2 else 2


def _frozen(**values: float) -> Mapping[str, float]:
    return MappingProxyType(values)


TRN1 = Chip(
    name="trn1", neuron_core=2, physical_cores=2,  # [T1] two NeuronCore-v2 (inf2's chip has the same cores [K1])
    # [K1]: TensorE "BF16, FP16, TF32, and cFP8 ... at a maximum throughput of 92 TFLOPS, as well as
    # 23 TFLOPS for FP32" per NeuronCore-v2 ([T1] rounds the chip to 190 and 47.5); cFP8 runs at
    # the BF16 rate.
    tensor_flops=_frozen(**{BF16: 92e12, FP32: 23e12, FP8: 92e12}),
    # cFP8's E4M3 has infinities and a max of 240: not torch's OCP float8_e4m3fn, which the
    # compiler refuses before trn3 [E51]; E5M2 is torch's float8_e5m2.
    tensor_float8=("float8_e5m2",),
    vector_flops=2.3e12,  # [N2] "The VectorEngine ... delivers 2.3 TFLOPS of FP32 computations"
    scalar_flops=2.9e12,  # [N2] "The ScalarEngine ... delivers 2.9 TFLOPS of FP32 computations"
    gpsimd_flops=0.575e12,  # not published: a quarter of VectorE, as for trn2
    # [K1] "data-path width and frequency" table (GHz): Tensor 2.8, Vector 1.12, Scalar/GpSimd 1.4.
    engine_clock_hz=_frozen(tensor=2.8e9, vector=1.12e9, scalar=1.4e9, gpsimd=1.4e9),
    lane_elements_per_cycle=_frozen(vector=128, scalar=128, gpsimd=128),  # [K1] "128 input/output"
    partitions=128,
    sbuf_bytes=24 * MiB,  # [K1] "a 24MiB SBUF" (192 KiB per partition)
    psum_bytes=2 * MiB,   # [K1] "a 2MiB PSUM" (16 KiB per partition)
    hbm_bytes=32 * GiB,   # [T1]
    hbm_bytes_per_s=820e9,  # [T1]/[K1] 820 GB/s
    dma_bytes_per_s=1e12,   # [T1] "1 TB/sec of DMA bandwidth"
    # [T2]'s comparison table: "Inter-chip Interconnect (GB/sec/chip) - 384 - 1280" (Trainium, Trainium2).
    interconnect_bytes_per_s=0.384e12,
    sources=("[T1]", "[N2]", "[K1]", "[T2]", "[E51]"),
)

TRN2 = Chip(
    name="trn2", neuron_core=3, physical_cores=8,  # [T2] eight NeuronCore-v3
    # [K2]/[N3]: "158 FP8, 79 BF16/FP16/TF32 and 20 FP32 dense TFLOPS" per NeuronCore-v3 TensorE.
    tensor_flops=_frozen(**{BF16: 79e12, FP32: 20e12, FP8: 158e12}),
    tensor_float8=("float8_e5m2",),  # as trn1's [E51]
    vector_flops=1.0e12,  # [K2]/[N3] "Vector Engine delivers a total of 1.0 TFLOPS of FP32"
    scalar_flops=1.2e12,  # [N3] "Scalar Engines ... deliver a total of 1.2 TFLOPS of FP32"
    # No published GpSimd rate (eight 512-bit general-purpose processors): assumed a quarter
    # of VectorE, as general-purpose cores are the slow path for element work.
    gpsimd_flops=0.25e12,
    # [K2] "Compute Engine Specifications" table (GHz): Tensor 2.4, Vector 0.96, Scalar/GpSimd 1.2.
    engine_clock_hz=_frozen(tensor=2.4e9, vector=0.96e9, scalar=1.2e9, gpsimd=1.2e9),
    # [K2] same table: Vector "512 BF16/FP16 input/output; 256 input/output for other data
    # types", Scalar "128 input/output"; GpSimd left blank there: assumed trn3's published 128.
    lane_elements_per_cycle=_frozen(vector=256, scalar=128, gpsimd=128),
    partitions=128,
    sbuf_bytes=28 * MiB,  # [K2] "28MiB (or, 128 partitions of 224KiB)"
    psum_bytes=2 * MiB,   # [K2] "PSUM capacity remains the same at 2MiB"
    hbm_bytes=96 * GiB,   # [T2]
    # [T2] 2.9 TB/s (the NKI guide [K2] rounds it to 3 TB/s).
    hbm_bytes_per_s=2.9e12,
    dma_bytes_per_s=3.5e12,  # [T2] "3.5 TB/sec of DMA bandwidth"
    interconnect_bytes_per_s=1.28e12,  # [T2] NeuronLink-v3, 1.28 TB/sec per chip
    sources=("[T2]", "[N3]", "[K2]", "[E51]"),
)

TRN3 = Chip(
    name="trn3", neuron_core=4, physical_cores=8,  # [T3] eight NeuronCore-v4
    # [N4]/[K3]: 315 MXFP8/MXFP4 TFLOPS, 79 BF16/FP16/TF32 and 20 FP32 per NeuronCore-v4 TensorE.
    # Plain FP8 is not MX: [K3] describes the data path as "8x128 (MXFP8) or 2x128 (non-MXFP8)"
    # and nc_matmul keeps FP8 double_row on NeuronCore-v4, so plain FP8 runs at 2x BF16 (158) and
    # only the MX formats at 4x ([T3]'s 2,517 FP8 chip TFLOPS = 8 x 315 is the MXFP8 rate).
    tensor_flops=_frozen(**{BF16: 79e12, FP32: 20e12, FP8: 158e12, MX: 315e12}),
    tensor_float8=("float8_e4m3fn", "float8_e5m2"),  # [E51] "natively supported on Trainium3"
    vector_flops=1.2e12,  # [N4]/[K3] "Vector Engine delivers a total of 1.2 TFLOPS of FP32"
    scalar_flops=1.2e12,  # [N4] "Scalar Engines ... deliver a total of 1.2 TFLOPS of FP32"
    # Not published either ([K3] gives a 128 elements/cycle data path at 1.2 GHz, no FLOP rate):
    # the trn2 assumption is kept.
    gpsimd_flops=0.25e12,
    # [K3] "Compute Engine Specifications" table (GHz): Tensor 2.4, Vector/Scalar/GpSimd 1.2.
    engine_clock_hz=_frozen(tensor=2.4e9, vector=1.2e9, scalar=1.2e9, gpsimd=1.2e9),
    # [K3] same table: Vector "512 BF16/FP16/FP8 ...; 256 input/output for other data types",
    # Scalar "256 BF16/FP16/FP8 ...; 128 input/output for other data types", GpSimd "128
    # input/output for all data types".
    lane_elements_per_cycle=_frozen(vector=256, scalar=128, gpsimd=128),
    partitions=128,
    sbuf_bytes=32 * MiB,  # [N4]/[K3]
    psum_bytes=2 * MiB,   # [K3] "PSUM capacity remains the same at 2MiB"
    hbm_bytes=144 * GiB,  # [T3]
    # [T3] 4.9 TB/s (the NKI guide [K3] says 4.7 TB/s; the chip page is taken as authoritative).
    hbm_bytes_per_s=4.9e12,
    dma_bytes_per_s=4.9e12,  # [T3] "4.9 TB/sec of DMA bandwidth"
    interconnect_bytes_per_s=2.56e12,  # [T3] NeuronLink-v4, 2.56 TB/sec per device
    sources=("[T3]", "[N4]", "[K3]", "[E51]"),
)

CHIPS: Mapping[str, Chip] = MappingProxyType({c.name: c for c in (TRN1, TRN2, TRN3)})


@dataclass(frozen=True)
class Instance:
    """One EC2 instance type: how many chips it holds, its network between instances and its price.

    Prices are on-demand list prices per instance-hour in the region and as of the date
    ``price_source`` gives (0: none collected); they change: the estimator prints the source."""

    name: str
    chip: Chip
    chips: int
    efa_bytes_per_s: float   # EFA network bandwidth per instance (0: no EFA, one instance only)
    price_per_hour: float
    price_source: str


# [T1] chip/instance tables of the Trainium architecture page: trn1.32xlarge 16 chips, 800 Gbps
#      EFA; trn1n.32xlarge 1,600 Gbps; trn1.2xlarge one chip, "up-to 25" Gbps (no EFA)
# [I2] Inferentia2 architecture page: inf2.48xlarge 12 chips (no EFA)
# [I3] Trainium2 architecture page: trn2.48xlarge 16 chips, "EFAv3 bandwidth (Gbps) - 3,200";
#      trn2.3xlarge one chip
# [I4] Trainium3 architecture page: a Gen1 UltraServer is 4 servers x 16 chips with 12,800 Gbps of
#      EFA (3,200 per server); no instance type name or price is published
# [P1] (SOURCES) read 2026-12-07: trn1/trn1n/inf2 us-east-1 "Last updated: 2026-01-21";
#      trn2.48xlarge us-east-2 (the only region listed) "Last updated: 2025-11-30"
_GBPS = 1e9 / 8
_UNPRICED = "no price collected (2026-12-07)"
INSTANCES: Mapping[str, Instance] = MappingProxyType({i.name: i for i in (
    Instance("trn1.2xlarge", TRN1, 1, 0.0, 0.0, _UNPRICED),
    Instance("trn1.32xlarge", TRN1, 16, 800 * _GBPS, 21.50, "[P1] us-east-1, 2026-01-21"),
    Instance("trn1n.32xlarge", TRN1, 16, 1600 * _GBPS, 24.78, "[P1] us-east-1, 2026-01-21"),
    # Inferentia2 has Trainium's NeuronCore-v2 and memory per chip [K1]: the trn1 facts.
    Instance("inf2.48xlarge", TRN1, 12, 0.0, 12.98, "[P1] us-east-1, 2026-01-21"),
    Instance("trn2.3xlarge", TRN2, 1, 0.0, 0.0, _UNPRICED),
    Instance("trn2.48xlarge", TRN2, 16, 3200 * _GBPS, 35.76, "[P1] us-east-2, 2025-11-30"),
    Instance("trn3-server", TRN3, 16, 3200 * _GBPS, 0.0, "not published (2026-12-07)"),
)})
DEFAULT_INSTANCE: Mapping[str, str] = MappingProxyType({"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge",
                                                        "trn3": "trn3-server"})


@dataclass(frozen=True)
class LogicalCore:
    """The figures of one logical core: ``physical`` physical cores' engines (their rates add up,
    the runtime spreads a logical core's work over them) and their share of the chip's HBM."""

    chip: Chip
    physical: int
    tensor_flops: Mapping[str, float]
    vector_flops: float
    scalar_flops: float
    gpsimd_flops: float
    lane_elements_per_s: Mapping[str, float]  # element-wise throughput: data path x clock
    hbm_bytes: int
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float  # its share of the chip's NeuronLink bandwidth


def logical_core(chip: Chip | str, logical_nc_config: int = 1) -> LogicalCore:
    """Per-core figures of ``chip`` split into logical cores of ``logical_nc_config`` physical cores
    (1: one physical core, the kernel simulator's unit; 2: the runtime's default)."""
    chip = CHIPS[chip] if isinstance(chip, str) else chip
    if logical_nc_config < 1 or chip.physical_cores % logical_nc_config:
        raise ValueError(f"{chip.name} has {chip.physical_cores} physical cores: cannot group them "
                         f"by {logical_nc_config}")
    n, share = logical_nc_config, logical_nc_config / chip.physical_cores
    return LogicalCore(chip, n, _frozen(**{k: n * v for k, v in chip.tensor_flops.items()}),
                       n * chip.vector_flops, n * chip.scalar_flops, n * chip.gpsimd_flops,
                       _frozen(**{engine: n * width * chip.engine_clock_hz[engine]
                                  for engine, width in chip.lane_elements_per_cycle.items()}),
                       int(chip.hbm_bytes * share), chip.hbm_bytes_per_s * share,
                       chip.interconnect_bytes_per_s * share)
