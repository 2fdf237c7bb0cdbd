"""RunReport: what a simulated kernel run did and its ESTIMATED cost per engine."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .cost_model import ENGINES, TENSOR, HardwareConfig


@dataclass(frozen=True)
class InstructionRecord:
    """One issued instruction; `seconds`/`cycles` are cost-model estimates."""

    engine: str
    opcode: str
    shape: tuple[int, ...]
    dtype: str
    flops: int
    dma_bytes: int
    seconds: float
    cycles: float
    location: str
    program_id: tuple[int, ...]


@dataclass
class RunReport:
    """Instruction counts, estimated busy time per engine and the estimated kernel time.

    Model: instructions of one engine run back to back; engines run concurrently, so the
    estimated kernel time is the busiest engine's time (`estimated_seconds`, a lower bound that
    assumes perfect overlap); `estimated_serial_seconds` is the no-overlap upper bound. SPMD grid
    programs are accounted as running one after another on one core.
    """

    kernel_name: str
    grid: tuple[int, ...]
    config: HardwareConfig
    instructions: list[InstructionRecord] = field(default_factory=list)
    engine_instructions: Counter = field(default_factory=Counter)
    opcode_counts: Counter = field(default_factory=Counter)
    engine_busy_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0.0))
    flops: int = 0
    dma_bytes: int = 0
    peak_sbuf_bytes_per_partition: int = 0
    peak_psum_banks: int = 0
    simulated_wall_seconds: float = 0.0

    def add(self, record: InstructionRecord) -> None:
        self.instructions.append(record)
        self.engine_instructions[record.engine] += 1
        self.opcode_counts[f"{record.engine}.{record.opcode}"] += 1
        self.engine_busy_seconds[record.engine] += record.seconds
        self.flops += record.flops
        self.dma_bytes += record.dma_bytes

    @property
    def instruction_count(self) -> int:
        return len(self.instructions)

    @property
    def estimated_seconds(self) -> float:
        return max(self.engine_busy_seconds.values())

    @property
    def estimated_serial_seconds(self) -> float:
        return sum(self.engine_busy_seconds.values())

    @property
    def tensor_flops(self) -> int:
        return sum(r.flops for r in self.instructions if r.engine == TENSOR)

    def to_dict(self) -> dict:
        return {
            "kernel": self.kernel_name, "grid": list(self.grid), "hardware": self.config.name,
            "estimated_seconds": self.estimated_seconds,
            "estimated_serial_seconds": self.estimated_serial_seconds,
            "engine_busy_seconds": dict(self.engine_busy_seconds),
            "engine_instructions": dict(self.engine_instructions),
            "opcode_counts": dict(self.opcode_counts),
            "flops": self.flops, "dma_bytes": self.dma_bytes,
            "peak_sbuf_bytes_per_partition": self.peak_sbuf_bytes_per_partition,
            "peak_psum_banks": self.peak_psum_banks,
            "simulated_wall_seconds": self.simulated_wall_seconds,
        }

    def __str__(self) -> str:
        total = self.estimated_seconds or 1.0
        lines = [f"NKI kernel '{self.kernel_name}' grid={self.grid} on {self.config.name} -- "
                 f"ESTIMATED engine times (cost model, not measurements)",
                 f"{'engine':<8} {'instr':>7} {'est. busy us':>13} {'% of est.':>9}"]
        for engine in ENGINES:
            busy = self.engine_busy_seconds[engine]
            lines.append(f"{engine:<8} {self.engine_instructions[engine]:>7} "
                         f"{busy * 1e6:>13.3f} {100 * busy / total:>8.1f}%")
        lines += [
            f"estimated kernel time: {self.estimated_seconds * 1e6:.3f} us (engines overlapped; "
            f"{self.estimated_serial_seconds * 1e6:.3f} us if serialized)",
            f"FLOPs: {self.flops:,} (TensorE {self.tensor_flops:,})   "
            f"DMA bytes: {self.dma_bytes:,}",
            f"peak SBUF: {self.peak_sbuf_bytes_per_partition:,} B/partition of "
            f"{self.config.sbuf_bytes_per_partition:,}   peak PSUM banks: "
            f"{self.peak_psum_banks}/{self.config.psum_banks}",
            f"simulator wall time: {self.simulated_wall_seconds * 1e3:.2f} ms "
            f"for {self.instruction_count} instructions",
            "instructions by opcode: " + ", ".join(
                f"{k}={v}" for k, v in self.opcode_counts.most_common()),
        ]
        return "\n".join(lines)

