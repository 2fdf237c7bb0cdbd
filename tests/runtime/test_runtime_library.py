"""The simulated runtime as a library of its own: its C++ tests (csrc/runtime/tests) are built
from the runtime's sources alone, with no PyTorch include path (so the runtime includes nothing of
PyTorch's), and run: queue order, priorities, deferred error order, events, allocator accounting,
capacity, stream-ordered frees, inline kernels, several cores and the shared-memory link's barrier
across forked processes."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "csrc" / "runtime"


def test_runtime_library_tests_pass(tmp_path):
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.fail("no C++ compiler: the extension needs one too (set CXX)")
    sources = sorted(RUNTIME.glob("*.cpp")) + [RUNTIME / "tests" / "runtime_tests.cpp"]
    binary = tmp_path / "runtime_tests"
    build = subprocess.run([compiler, "-std=c++17", "-O1", "-pthread", "-Wall", "-Wextra", "-Werror",
                            "-Wno-missing-field-initializers",  # aggregates with defaulted members
                            *map(str, sources), "-o", str(binary)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tests, 0 failed" in run.stdout, run.stdout
