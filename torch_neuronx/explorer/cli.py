"""``neuron-explorer``: Neuron Explorer's command line over the simulator's profiles.

    neuron-explorer view -d PROFILE_DIR [--port N]         # the web UI on 127.0.0.1
    neuron-explorer view -d PROFILE_DIR --output-format summary-text
    neuron-explorer view -d PROFILE_DIR --output-format summary-json
    neuron-explorer view -d PROFILE_DIR --output-format perfetto [--output-file DIR]
    neuron-explorer view --show-profile-schema

``PROFILE_DIR`` is a ``NeuronConfig.profile_output_dir`` or one exported profile directory (the
newest profile under it is used). As in Explorer: ``summary-text`` prints the Summary table as
``name value`` lines in the schema's fixed order, ``summary-json`` the same fields as JSON (the
data of ``Summary.parquet``), ``perfetto`` writes the trace Perfetto opens (the framework trace
with the kernel-language instructions' ESTIMATED timeline added as device lanes), and
``--show-profile-schema`` prints the schema of every table (SchemaFields). Without an output
format, ``view`` serves the web UI (:mod:`.server`) over every profile under ``PROFILE_DIR`` on a
loopback port (``--port``, default any free one) and prints its address; Ctrl-C stops it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ..profiling import explorer_schema
from ..profiling.exporter import TRACE_FILE
from ..profiling.report import find_profile

FORMATS = ("summary-text", "summary-json", "perfetto")
PERFETTO_FILE = "system_profile.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neuron-explorer", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    view = sub.add_parser("view", help="view or convert a profile")
    view.add_argument("-d", "--session-dir", type=Path, help="profile_output_dir, or one exported profile directory")
    view.add_argument("--output-format", choices=FORMATS, help="print or write the profile instead of serving the UI")
    view.add_argument("--output-file", type=Path, help="perfetto: the directory to write into (default: the profile's)")
    view.add_argument("--show-profile-schema", action="store_true", help="print every table's fields and exit")
    view.add_argument("--port", type=int, default=0, help="the UI's port on 127.0.0.1 (default: any free port)")
    return p


def summary(profile: Path) -> dict[str, Any]:
    """The profile's Summary row with its Metadata's schema version and target, in schema order."""
    [row] = pq.read_table(profile / "Summary.parquet").to_pylist()
    [meta] = pq.read_table(profile / "Metadata.parquet").to_pylist()
    return {"profile_schema_version": meta["profile_schema_version"], "is_simulation": meta["is_simulation"],
            "target_generation": meta["target_generation"], **row}


def summary_text(values: dict[str, Any]) -> str:
    width = max(map(len, values))
    return "\n".join(f"{name:<{width}}  {_text(value)}" for name, value in values.items())


def _text(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def perfetto(profile: Path, out_dir: Path) -> Path:
    """The framework trace with one device lane per engine and core carrying the recorded
    kernel-language instructions at their ESTIMATED times (Chrome trace JSON, which Perfetto opens)."""
    trace = json.loads((profile / TRACE_FILE).read_text())
    base_us = trace.get("baseTimeNanoseconds", 0) / 1e3
    pid = "neuron device (ESTIMATED instruction timeline)"
    rows = pq.read_table(profile / "Instruction.parquet").to_pylist()
    lanes = sorted({(r["core"], r["engine"]) for r in rows})
    tid = {lane: i for i, lane in enumerate(lanes)}
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": pid}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid[lane],
                "args": {"name": f"core {lane[0]} {lane[1]}"}} for lane in lanes]
    events += [{"ph": "X", "name": r["opcode"], "pid": pid, "tid": tid[(r["core"], r["engine"])],
                "ts": r["start_ts"] / 1e3 - base_us, "dur": r["duration_ns"] / 1e3,
                "args": {"kernel": r["kernel_name"], "operands": r["operands"], "source": r["nki_source_location"],
                         "estimated": True}} for r in rows]
    trace["traceEvents"] = trace.get("traceEvents", []) + events
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / PERFETTO_FILE
    path.write_text(json.dumps(trace))
    return path


def _serve(root: Path, port: int) -> int:
    from .server import serve
    try:
        server = serve(root, port)
    except OSError as e:
        print(f"neuron-explorer view: cannot listen on 127.0.0.1:{port}: {e}", file=sys.stderr)
        return 2
    print(f"Neuron Explorer: http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.show_profile_schema:
        print(json.dumps(explorer_schema.schema_fields().to_pylist(), indent=1))
        return 0
    if args.session_dir is None:
        print("neuron-explorer view: give the profile directory with -d PROFILE_DIR", file=sys.stderr)
        return 2
    try:
        profile = find_profile(args.session_dir)
    except FileNotFoundError as e:
        print(f"neuron-explorer view: {e}", file=sys.stderr)
        return 2
    if args.output_format is None:
        return _serve(args.session_dir, args.port)
    if args.output_format == "perfetto":
        print(perfetto(profile, args.output_file or profile))
    elif args.output_format == "summary-json":
        print(json.dumps(summary(profile), indent=1))
    else:
        print(summary_text(summary(profile)))
    return 0
