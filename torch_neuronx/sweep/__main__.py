"""Command line: ``python -m torch_neuronx.sweep [options]`` (or ``torch-neuronx-sweep``).

Runs every model (by default every causal-LM architecture of the installed Transformers, built
tiny) through its stages on the CPU and on ``neuron``, each in its own child process, and writes
results.parquet, results.csv, summary.md and summary.png to ``--out``. See docs/model-coverage.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TextIO

from . import models, report, results, stages


class Progress:
    """A one-line progress bar with ETA, redrawn with a carriage return."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.total, self.stream, self.width = total, stream, width
        self.done, self.failed, self.start = 0, 0, time.monotonic()

    def update(self, row: dict[str, Any]) -> None:
        self.done += 1
        self.failed += bool(row["failed_stage"])
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        filled = self.width * self.done // max(self.total, 1)
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                          f"failed {self.failed}  {_minutes(elapsed)} elapsed, ETA {_minutes(eta)}  "
                          f"{row['key'][:40]:<40}")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: I must be in [0, N)")
    return index, count


def _tasks(text: str) -> list[str]:
    tasks = [t for t in text.split(",") if t]
    unknown = sorted(set(tasks) - set(models.TASKS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown tasks {unknown}; choose among {', '.join(models.TASKS)}")
    return tasks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_neuronx.sweep",
                                description="Run every Transformers architecture, built tiny, on neuron and the CPU.")
    p.add_argument("--out", default="sweep-results", help="output directory (default ./sweep-results)")
    p.add_argument("--tasks", type=_tasks, default=["causal-lm"],
                   help=f"comma-separated task heads: {', '.join(models.TASKS)} (default causal-lm)")
    p.add_argument("--models", nargs="+", metavar="MODEL",
                   help="instead of every architecture: model directories (with config.json), config files "
                        "or model_types")
    p.add_argument("--select", help="comma-separated model_types (or --models entries) to run, of the list")
    p.add_argument("--limit", type=int, help="the first K models of the sorted list")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                   help="run every N-th model of the sorted list starting at I (after --select and --limit)")
    p.add_argument("--jobs", type=int, default=1, help="models run in parallel, one child process each")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile stages")
    p.add_argument("--dtype", default="float32", choices=sorted(stages.TOLERANCES),
                   help="the models' dtype on both devices; parity tolerances follow it (default float32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs (default 0)")
    p.add_argument("--restart", action="store_true", help="forget the models a previous run in --out finished")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--merge", nargs="+", metavar="DIR", help="combine these result directories into --out")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="print the Markdown diff of two result tables")
    return p


def plan(a: argparse.Namespace) -> list[models.ModelSpec]:
    """The models this invocation is responsible for: listed, selected, limited, sharded."""
    specs = models.user_models(a.models, a.tasks) if a.models else models.default_models(a.tasks)
    chosen = models.select(specs, a.select.split(",") if a.select else None, a.limit)
    return models.shard(chosen, *a.shard)


def sweep(todo: list[models.ModelSpec], a: argparse.Namespace) -> None:
    """Run ``todo``, appending each finished row to the out dir's log."""
    progress = None if a.quiet else Progress(len(todo))
    with ThreadPoolExecutor(max(a.jobs, 1)) as pool:
        futures = [pool.submit(stages.run_isolated, spec, a.seed, a.dtype, not a.no_compile, a.timeout)
                   for spec in todo]
        for future in as_completed(futures):
            row = future.result()
            results.append_jsonl(a.out, row)
            if progress:
                progress.update(row)
    if progress:
        progress.close()


def publish(rows: list[dict[str, Any]], out: str, command: str, seconds: float | None) -> None:
    results.write_tables(rows, out)
    report.write_report(rows, out, command, seconds)
    figures = report.headline(rows)
    print("; ".join(f"{k}: {v}" for k, v in figures.items()))
    print(f"wrote {os.path.join(out, results.PARQUET)}, {results.CSV}, summary.md, summary.png")


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    command = "python -m torch_neuronx.sweep " + " ".join(sys.argv[1:] if argv is None else argv)
    if a.compare:
        print(report.compare(results.read_table(a.compare[0]), results.read_table(a.compare[1])))
        return 0
    os.makedirs(a.out, exist_ok=True)
    if a.merge:
        publish(results.merge(a.merge), a.out, command, None)
        return 0
    if a.restart and os.path.exists(os.path.join(a.out, results.JSONL)):
        os.remove(os.path.join(a.out, results.JSONL))
    done = {r["key"] for r in results.read_jsonl(a.out)}
    specs = plan(a)
    todo = [s for s in specs if s.key not in done]
    print(f"{len(specs)} models, {len(specs) - len(todo)} already done in {a.out}, {len(todo)} to run", file=sys.stderr)
    start = time.monotonic()
    sweep(todo, a)
    publish(results.read_jsonl(a.out), a.out, command, time.monotonic() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
