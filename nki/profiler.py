"""`nki.profile`: the published profiling decorator, filled from the simulator's cost model.

On a chip it saves the compiled NEFF and the captured NTFF trace. Nothing is compiled or captured
here: the decorator writes the simulator's ESTIMATED timeline as a Chrome/Perfetto trace (one lane
per engine of each program: each engine runs its instructions back to back in issue order and the
engines run concurrently, the model behind `RunReport.estimated_seconds`) and the RunReport as a
JSON summary.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .jit import Gridded, Kernel, simulate
from .simulator import RunReport, last_report


def trace_events(report: RunReport) -> list[dict[str, Any]]:
    """Chrome trace events of the estimated timeline: a process per program, a thread per engine."""
    events: list[dict[str, Any]] = []
    lanes: set[tuple[tuple[int, ...], str]] = set()
    programs: dict[tuple[int, ...], int] = {}
    for start, record in report.schedule():
        pid = programs.setdefault(record.program_id, len(programs))
        lanes.add((record.program_id, record.engine))
        events.append({"name": record.opcode, "ph": "X", "pid": pid, "tid": record.engine, "ts": start * 1e6,
                       "dur": record.seconds * 1e6,
                       "args": {"shape": list(record.shape), "dtype": record.dtype, "flops": record.flops,
                                "dma_bytes": record.dma_bytes, "location": record.location}})
    events += [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"program {list(program)}"}}
               for program, pid in programs.items()]
    events += [{"name": "thread_name", "ph": "M", "pid": programs[program], "tid": engine, "args": {"name": engine}}
               for program, engine in sorted(lanes)]
    return events


class Profiled:
    """A kernel wrapped by `nki.profile`: call it with numpy arrays; it returns the kernel's outputs
    and, on the `profile_nth` call, writes the trace and the summary into `working_directory`."""

    def __init__(self, kernel: Any, working_directory: str | None = None, save_neff_name: str = "file.neff",
                 save_trace_name: str = "profile.ntff", additional_compile_opt: str | None = None,
                 overwrite: bool = False, profile_nth: int = 1) -> None:
        if working_directory is None or not Path(working_directory).is_absolute():
            raise ValueError(f"nki.profile needs working_directory, an absolute path, got {working_directory!r}")
        if int(profile_nth) < 1:
            raise ValueError(f"nki.profile: profile_nth counts calls from 1, got {profile_nth!r}")
        self.kernel = kernel if isinstance(kernel, (Kernel, Gridded)) else Kernel(kernel)
        stem = Path(save_trace_name).stem
        directory = Path(working_directory)
        self.trace_path = directory / f"{stem}.json"
        self.summary_path = directory / f"{stem}_summary.json"
        self.overwrite, self.profile_nth, self.calls = overwrite, int(profile_nth), 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.profile_nth and not self.overwrite:
            existing = [str(p) for p in (self.trace_path, self.summary_path) if p.exists()]
            if existing:  # checked before running, so a refused call changes nothing
                raise FileExistsError(f"nki.profile: {', '.join(existing)} exist; pass overwrite=True to replace them")
        outputs = simulate(self.kernel)(*args, **kwargs)
        if self.calls == self.profile_nth:
            report = last_report()
            assert report is not None
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            self.trace_path.write_text(json.dumps({"traceEvents": trace_events(report),
                                                   "displayTimeUnit": "ns"}))
            self.summary_path.write_text(json.dumps(report.to_dict(), indent=1))
        return outputs


def profile(func: Any = None, **kwargs: Any) -> Any:
    """``@nki.profile(working_directory="/abs/dir", save_trace_name="profile.ntff")`` or
    ``nki.profile(kernel, working_directory=...)``: see `Profiled`. The trace is written as
    ``<working_directory>/<trace stem>.json`` and the summary as ``<trace stem>_summary.json``;
    save_neff_name and additional_compile_opt have no effect (nothing is compiled)."""
    if func is None:
        return lambda k: Profiled(k, **kwargs)
    return Profiled(func, **kwargs)
