"""`neuron-explorer view` (python -m torch_neuronx.explorer): Explorer's non-UI output formats over a
profile NeuronProfiler wrote."""
from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from torch_neuronx.profiling import explorer_schema


@pytest.fixture(scope="module")
def profile_dir(step_profile):
    """(profile_output_dir, profile) of examples/explorer_profile.py (conftest.py)."""
    return step_profile


def explorer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_neuronx.explorer", *args], capture_output=True, text=True,
                          timeout=300)


def test_summary_text_and_json_are_the_summary_table(profile_dir):
    root, profile_path = profile_dir
    [row] = pq.read_table(profile_path / "Summary.parquet").to_pylist()
    text = explorer("view", "-d", str(root), "--output-format", "summary-text")
    assert text.returncode == 0, text.stderr
    lines = dict(line.split(None, 1) for line in text.stdout.splitlines())
    assert list(lines)[3:] == list(row)  # the schema's fixed order, after the schema version and target
    assert lines["profile_schema_version"] == explorer_schema.SCHEMA_VERSION
    assert float(lines["total_time"]) == pytest.approx(row["total_time"], rel=1e-5)
    data = json.loads(explorer("view", "-d", str(profile_path), "--output-format", "summary-json").stdout)
    assert {k: data[k] for k in row} == row and data["is_simulation"] is True


def test_perfetto_adds_the_estimated_instruction_lanes_to_the_framework_trace(profile_dir, tmp_path):
    _, profile_path = profile_dir
    out = explorer("view", "-d", str(profile_path), "--output-format", "perfetto", "--output-file", str(tmp_path))
    assert out.returncode == 0, out.stderr
    trace = json.loads((tmp_path / "system_profile.json").read_text())
    device = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "ESTIMATED" in str(e.get("pid"))]
    instructions = pq.read_table(profile_path / "Instruction.parquet").to_pylist()
    assert len(device) == len(instructions) > 0
    assert all(e["args"]["estimated"] and e["dur"] >= 0 for e in device)
    framework = [e for e in trace["traceEvents"] if e.get("name") == "aten::addmm"]
    assert framework  # the framework trace is kept


def test_the_schema_and_the_errors(tmp_path):
    schema = json.loads(explorer("view", "--show-profile-schema").stdout)
    assert schema == explorer_schema.schema_fields().to_pylist()
    missing = explorer("view", "-d", str(tmp_path), "--output-format", "summary-text")
    assert missing.returncode == 2 and "no exported profile" in missing.stderr
    assert explorer("view").returncode == 2
