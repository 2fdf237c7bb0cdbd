"""Where and when a measurement was taken, recorded next to every published figure (benchmark
tables, the conformance summary) so that a reader can tell which machine and build it describes."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess

import torch


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    """The repository's commit, with ``+dirty`` when tracked files differ from it (the figures
    then describe uncommitted code)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  check=True).stdout.strip()
        return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance() -> dict[str, object]:
    """Date, machine (CPU model, cores), torch version and git commit of this run."""
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "cpu": _cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "commit": _git_commit()}
