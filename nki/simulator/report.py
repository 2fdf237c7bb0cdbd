"""RunReport: what a simulated kernel run did and its ESTIMATED cost per engine."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
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
    depends_on: tuple[int, ...] = ()  # the instructions (indexes) that wrote what it reads


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
    engine_instructions: Counter = field(default_factory=Counter)
    opcode_counts: Counter = field(default_factory=Counter)
    engine_busy_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0.0))
    flops: int = 0
    tensor_flops: int = 0  # the TensorE part of `flops`
    dma_bytes: int = 0
    peak_sbuf_bytes_per_partition: int = 0
    peak_psum_banks: int = 0
    simulated_wall_seconds: float = 0.0
    # Issued instructions as plain tuples (InstructionRecord fields in order): building a record
    # object and naming its dtype per instruction would cost more than most instructions compute.
    _issued: list[tuple] = field(default_factory=list, repr=False)
    _records: list[InstructionRecord] = field(default_factory=list, repr=False)

    def add(self, engine: str, opcode: str, shape: tuple[int, ...], dtype: object, flops: int, dma_bytes: int,
            seconds: float, location: str, program_id: tuple[int, ...], depends_on: tuple[int, ...] = ()) -> int:
        """Account one issued instruction; returns its index."""
        self._issued.append((engine, opcode, shape, dtype, flops, dma_bytes, seconds, location, program_id,
                             depends_on))
        self.engine_instructions[engine] += 1
        self.opcode_counts[engine + "." + opcode] += 1
        self.engine_busy_seconds[engine] += seconds
        self.flops += flops
        if engine == TENSOR:
            self.tensor_flops += flops
        self.dma_bytes += dma_bytes
        return len(self._issued) - 1

    @property
    def instructions(self) -> list[InstructionRecord]:
        """The issued instructions, in issue order."""
        clock = self.config.clock_hz
        for engine, opcode, shape, dtype, flops, dma_bytes, seconds, location, program_id, after in \
                self._issued[len(self._records):]:
            self._records.append(InstructionRecord(
                engine, opcode, tuple(int(s) for s in shape), str(dtype), int(flops), int(dma_bytes), seconds,
                seconds * clock, location, program_id, after))
        return self._records

    def schedule(self) -> list[tuple[float, InstructionRecord]]:
        """The ESTIMATED timeline behind :attr:`estimated_seconds`: each instruction with its start
        (seconds from the launch), every engine running its instructions back to back in issue
        order and the engines concurrently."""
        engine_free: dict[str, float] = {}
        timeline = []
        for record in self.instructions:
            start = engine_free.get(record.engine, 0.0)
            engine_free[record.engine] = start + record.seconds
            timeline.append((start, record))
        return timeline

    def dependent_schedule(self, seconds: Sequence[float] | None = None) -> list[tuple[float, int | None, float]]:
        """The timeline with data dependencies: each instruction starts when its engine is free and
        the instructions that wrote what it reads have finished (engines in issue order). Per
        instruction, its start (seconds from the launch), the instruction it waited for (the
        producer that ended after its engine was free; None when its engine was the bound) and how
        long its engine waited for it. ``seconds``: the instructions' times to schedule instead of
        their own (the same kernel re-timed for another generation). Longer than
        :attr:`estimated_seconds`, the perfect-overlap bound, wherever a kernel's engines wait for
        one another."""
        records = self.instructions
        took = seconds if seconds is not None else [r.seconds for r in records]
        engine_free: dict[str, float] = {}
        ends: list[float] = []
        out: list[tuple[float, int | None, float]] = []
        for record, duration in zip(records, took):
            free = engine_free.get(record.engine, 0.0)
            start, waited = free, None
            for d in record.depends_on:
                if ends[d] > start:
                    start, waited = ends[d], d
            engine_free[record.engine] = start + duration
            ends.append(start + duration)
            out.append((start, waited, start - free))
        return out

    @property
    def instruction_count(self) -> int:
        return len(self._issued)

    @property
    def estimated_seconds(self) -> float:
        return max(self.engine_busy_seconds.values())

    @property
    def estimated_serial_seconds(self) -> float:
        return sum(self.engine_busy_seconds.values())

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

