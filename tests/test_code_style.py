"""The code-style checks, with the configuration in pyproject.toml and .clang-format: ruff's lint
of the Python tree, clang-format's format of csrc/, and mypy's types of the public Python API.

Each tool comes with the `test` extra at the version constraints.txt pins; a test whose tool is
missing, or is another version (whose rules or formatting may differ), is skipped and says so."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_TREE = ["torch_neuronx", "nki", "tests", "tools", "benchmarks", "examples", "setup.py"]
INSTALL = "it comes with the `test` extra, which the README's test command installs"


def pinned(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.lower().startswith(name + "=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"constraints.txt pins no {name}")


def tool(name: str) -> list[str]:
    """The command of the pinned `name` (the environment's own first, then PATH), or a skip."""
    if name == "mypy":  # run by this interpreter, so it checks against the packages installed here
        if importlib.util.find_spec("mypy") is None:
            pytest.skip(f"mypy is not installed ({INSTALL})")
        command = [sys.executable, "-m", "mypy"]
    else:
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        found = shutil.which(name, path=path)
        if found is None:
            pytest.skip(f"{name} is not installed ({INSTALL})")
        command = [found]
    version = subprocess.run([*command, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"\d+\.\d+(\.\d+)?", version)
    if match is None or match.group() != pinned(name):
        pytest.skip(f"{name} {match.group() if match else '?'} found, constraints.txt pins {pinned(name)}")
    return command


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def report(result: subprocess.CompletedProcess, limit: int = 6000) -> str:
    return (result.stdout + result.stderr)[:limit]


def test_ruff_finds_nothing():
    result = run([*tool("ruff"), "check", "--no-cache", *PYTHON_TREE])
    assert result.returncode == 0, "ruff check (fix, then rerun):\n" + report(result)


def test_csrc_is_clang_formatted():
    sources = sorted(str(p.relative_to(ROOT)) for ext in ("h", "cpp") for p in (ROOT / "csrc").rglob(f"*.{ext}"))
    assert sources
    result = run([*tool("clang-format"), "--dry-run", "--Werror", *sources])
    assert result.returncode == 0, "clang-format -i csrc/... would change:\n" + report(result)


def test_public_api_type_checks():
    result = run(tool("mypy"))  # the files and options of [tool.mypy] in pyproject.toml
    assert result.returncode == 0, "mypy:\n" + report(result)
