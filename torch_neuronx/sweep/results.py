"""The results table: one row per model with flat columns, its files (Parquet, CSV, and the JSONL
log a run appends to as models finish), and merging shards."""
from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from typing import Any

# The stages, in the order a child runs them; "cpu" is the reference on the CPU.
STAGES = ("build", "cpu", "move", "forward", "backward", "optimizer", "parity", "compile", "compile_parity")
PASS, FAIL, MISMATCH, SKIP = "pass", "fail", "mismatch", "skip"
LAYERS = ("torch_neuronx", "torch", "model")
# What parity compares: the loss, the logits, the gradients, the weights after one optimizer step.
COMPARED = ("loss", "logits", "grads", "weights")

COLUMNS: tuple[str, ...] = (
    "key", "model_type", "class", "task", "source",
    *(f"status_{s}" for s in STAGES),
    "failed_stage", "error_type", "error_message", "error_layer", "cpu_error",
    "cpu_pass", "neuron_pass", "parity_ok", "compile_pass", "compile_parity_ok",
    *(f"max_abs_diff_{c}" for c in COMPARED), *(f"compile_max_abs_diff_{c}" for c in COMPARED[:3]),
    "fallback_ops", "compile_fallback_ops", "compile_graphs", "compile_graph_breaks",
    "parameters", "peak_memory_bytes", *(f"seconds_{s}" for s in STAGES), "seconds_total",
    "dtype", "seed", "torch_version", "transformers_version", "torch_neuronx_version",
)
BOOLEANS = ("cpu_pass", "neuron_pass", "parity_ok", "compile_pass", "compile_parity_ok")
INTEGERS = ("compile_graphs", "compile_graph_breaks", "parameters", "peak_memory_bytes", "seed")
FLOATS = tuple(c for c in COLUMNS if c.startswith(("max_abs_diff_", "compile_max_abs_diff_", "seconds_")))

JSONL = "results.jsonl"
PARQUET = "results.parquet"
CSV = "results.csv"


def empty_row(**values: Any) -> dict[str, Any]:
    """A row with every column: stages not run are skipped, figures not measured are None."""
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row.update({f"status_{s}": SKIP for s in STAGES}, **{c: False for c in BOOLEANS})
    row.update({c: "" for c in ("failed_stage", "error_type", "error_message", "error_layer", "cpu_error",
                                "fallback_ops", "compile_fallback_ops")})
    row.update(values)
    return row


def append_jsonl(out_dir: str, row: dict[str, Any]) -> None:
    """Add a finished model to the run's log (what a resumed run skips)."""
    with open(os.path.join(out_dir, JSONL), "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(out_dir: str) -> list[dict[str, Any]]:
    """The log's rows, the last one of each key winning; a line cut short by a kill is ignored."""
    path = os.path.join(out_dir, JSONL)
    rows: dict[str, dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                rows[row["key"]] = empty_row(**row)
    return sorted(rows.values(), key=lambda r: r["key"])


def write_tables(rows: list[dict[str, Any]], out_dir: str) -> None:
    """results.parquet and results.csv, columns in COLUMNS order."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    types = {**{c: pa.bool_() for c in BOOLEANS}, **{c: pa.int64() for c in INTEGERS},
             **{c: pa.float64() for c in FLOATS}}
    schema = pa.schema([(c, types.get(c, pa.string())) for c in COLUMNS])
    table = pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema)
    pq.write_table(table, os.path.join(out_dir, PARQUET))
    with open(os.path.join(out_dir, CSV), "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def read_table(path: str) -> list[dict[str, Any]]:
    """Rows of a results directory (its Parquet, else its CSV, else its JSONL log) or of one file."""
    if os.path.isdir(path):
        for name in (PARQUET, CSV):
            if os.path.exists(os.path.join(path, name)):
                return read_table(os.path.join(path, name))
        return read_jsonl(path)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        return [empty_row(**r) for r in pq.read_table(path).to_pylist()]
    with open(path, newline="") as f:
        return [_typed(r) for r in csv.DictReader(f)]


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A CSV row with its booleans and numbers back."""
    out: dict[str, Any] = dict(row)
    for c in BOOLEANS:
        out[c] = row.get(c) == "True"
    for c in INTEGERS + FLOATS:
        out[c] = (int if c in INTEGERS else float)(row[c]) if row.get(c) not in (None, "") else None
    return empty_row(**out)


def merge(sources: Iterable[str]) -> list[dict[str, Any]]:
    """The rows of several result directories (shards) as one table; a key in several, the last."""
    rows: dict[str, dict[str, Any]] = {}
    for source in sources:
        rows.update((r["key"], r) for r in read_table(source))
    return sorted(rows.values(), key=lambda r: r["key"])


def outcome(row: dict[str, Any]) -> str:
    """One word for a row: where it stands on the ladder CPU -> neuron -> parity -> compile."""
    if not row["cpu_pass"]:
        return "cpu-fail"
    if not row["neuron_pass"]:
        return "neuron-fail"
    if not row["parity_ok"]:
        return "mismatch"
    if row["status_compile"] == SKIP:
        return "pass (not compiled)"
    return "pass" if row["compile_parity_ok"] else "compile-fail"


def cause(row: dict[str, Any]) -> str:
    """The failure as one line: stage, layer, exception and message."""
    if not row["failed_stage"]:
        return ""
    return (f"{row['failed_stage']} [{row['error_layer']}] {row['error_type']}: {row['error_message']}"
            .rstrip(": "))


def cell(text: str, limit: int = 160) -> str:
    """Text for a Markdown table cell."""
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
