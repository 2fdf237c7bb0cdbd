"""Per-thread state of the kernel run in progress (the simulator keeps no other mutable state)."""
from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ..errors import NKIError, source_location
from .cost_model import HardwareConfig
from .report import RunReport

_local = threading.local()


class RunContext:
    """One program of a `run()` call: grid position, on-chip allocation accounting, the report
    (shared by all programs of the launch) and the launch it belongs to (`nki.simulator.spmd`)."""

    def __init__(self, kernel_name: str, config: HardwareConfig, grid: tuple[int, ...],
                 fp32_compute: bool, *, report: RunReport | None = None, launch: Any = None,
                 rank: int = 0, program_id: tuple[int, ...] | None = None) -> None:
        self.config = config
        self.grid = grid
        self.fp32_compute = fp32_compute
        self.program_id: tuple[int, ...] = program_id if program_id is not None else tuple(0 for _ in grid)
        self.report = report if report is not None else RunReport(kernel_name, grid, config)
        if launch is None:
            from .spmd import Launch  # a context of its own (tests, tools) is a launch of one program
            launch = Launch(1)
        self.launch = launch
        self.rank = rank  # row-major index of the program in the grid: its rank for cross-core instructions
        self.cross_core_calls: dict[Any, int] = {}  # (instruction kind, group) -> calls so far (pairs them up)
        self.sbuf_bytes = 0
        self.psum_banks = 0
        self.registers: dict[str, Any] = {}  # engine -> per-partition reduction registers
        self.rng_states: dict[str, Any] = {}  # engine -> per-lane PRNG state words (nki.simulator.prng)
        self.loop_reductions: dict[str, Any] = {}  # kernel line -> running nl.loop_reduce result
        self.scalar_registers: list[int | None] = []  # nisa.VirtualRegister slot -> value (None: unset)
        self._shared_hbm_next = 0
        # Data dependencies between instructions (RunReport.dependent_schedule): the buffers the
        # instruction being issued reads and writes, and each buffer's last writer (report index).
        self._reads: set[int] = set()
        self._writes: set[int] = set()
        self._writer: dict[int, int] = {}

    def touch(self, tile: Any, write: bool = False) -> None:
        """The instruction being issued reads (or writes) ``tile``'s buffer (its root tile)."""
        while getattr(tile, "_base", None) is not None:
            tile = tile._base
        (self._writes if write else self._reads).add(id(tile))

    def shared_hbm(self, make: Any) -> Any:
        """shared_hbm tensors are shared by all programs of the launch: the n-th allocation of every
        program returns the same tensor."""
        tensors = self.launch.shared_hbm
        if self._shared_hbm_next == len(tensors):
            tensors.append(make())
        tensor = tensors[self._shared_hbm_next]
        self._shared_hbm_next += 1
        return tensor

    def next_call(self, kind: Any) -> int:
        """Position of this call among the program's cross-core calls of `kind`: the n-th calls of
        the programs of a group meet."""
        n = self.cross_core_calls.get(kind, 0)
        self.cross_core_calls[kind] = n + 1
        return n

    def allocate(self, tile: Any, buffer: str, bytes_per_partition: int) -> None:
        """Account an on-chip tile until it is garbage collected (tiles are live while referenced)."""
        cfg = self.config
        if buffer == "sbuf":
            if self.sbuf_bytes + bytes_per_partition > cfg.sbuf_bytes_per_partition:
                raise NKIError("sbuf-capacity", f"SBUF allocation of {bytes_per_partition} "
                               f"bytes/partition (tile {tuple(tile.shape)} {tile.dtype}) exceeds the "
                               f"{cfg.sbuf_bytes_per_partition} bytes/partition of {cfg.name}: "
                               f"{self.sbuf_bytes} bytes/partition are held by live tiles",
                               source_location())
            self.sbuf_bytes += bytes_per_partition
            self.report.peak_sbuf_bytes_per_partition = max(
                self.report.peak_sbuf_bytes_per_partition, self.sbuf_bytes)
            weakref.finalize(tile, self._release_sbuf, bytes_per_partition)
        else:
            banks = -(-bytes_per_partition // cfg.psum_bank_bytes)
            if self.psum_banks + banks > cfg.psum_banks:
                raise NKIError("psum-capacity", f"PSUM allocation of {bytes_per_partition} "
                               f"bytes/partition ({banks} bank(s) of {cfg.psum_bank_bytes} B, tile "
                               f"{tuple(tile.shape)} {tile.dtype}) exceeds PSUM: {self.psum_banks} of "
                               f"{cfg.psum_banks} banks are held by live tiles "
                               f"({cfg.psum_bytes_per_partition} B/partition)", source_location())
            self.psum_banks += banks
            self.report.peak_psum_banks = max(self.report.peak_psum_banks, self.psum_banks)
            weakref.finalize(tile, self._release_psum, banks)

    def _release_sbuf(self, nbytes: int) -> None:
        self.sbuf_bytes -= nbytes

    def _release_psum(self, banks: int) -> None:
        self.psum_banks -= banks

    def record(self, engine: str, opcode: str, shape: tuple[int, ...], dtype: np.dtype,
               seconds: float, flops: int = 0, dma_bytes: int = 0) -> None:
        after = tuple(sorted({self._writer[b] for b in self._reads if b in self._writer}))
        index = self.report.add(engine, opcode, shape, dtype, flops, dma_bytes, seconds, source_location(),
                                self.program_id, after)
        for buffer in self._writes:
            self._writer[buffer] = index
        self._reads.clear()
        self._writes.clear()


def touch(tile: Any, write: bool = False) -> None:
    """:meth:`RunContext.touch` of the run in progress (nothing outside a kernel run)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is not None:
        ctx.touch(tile, write)


def current() -> RunContext:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise NKIError("no-kernel-run", "nki.language / nki.isa calls only work inside a kernel "
                       "run: call the @nki.jit kernel or nki.simulate(kernel)(...)")
    return ctx


def push(ctx: RunContext) -> RunContext | None:
    previous = getattr(_local, "ctx", None)
    _local.ctx = ctx
    return previous


def pop(ctx: RunContext, previous: RunContext | None) -> None:
    _local.ctx = previous
    _local.last_report = ctx.report


def set_last_report(report: RunReport) -> None:
    _local.last_report = report


def last_report() -> RunReport | None:
    """The report of the calling thread's most recent kernel run (None if it ran none)."""
    return getattr(_local, "last_report", None)
