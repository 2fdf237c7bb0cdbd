"""Checks that the default test suite does not depend on the order its tests run in.

Runs, one after another: the whole suite in reverse order (``--reverse``, tests/conftest.py),
each test directory on its own, and each file of tests/compile and tests/profiling on its own.
Every test also fails by itself if it leaves torch's configuration, the environment or the
default dtype/device changed (tests/conftest.py). Usage, from the repository root (about 9
minutes on 2 cores)::

    python tools/check_test_isolation.py [extra pytest arguments]
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def runs() -> list[tuple[str, list[str]]]:
    out = [("whole suite, reverse order", ["tests", "--reverse"])]
    for directory in sorted(p for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith("__")):
        out.append((f"{directory.name}/ alone", [str(directory.relative_to(ROOT))]))
    for directory in ("compile", "profiling"):
        for path in sorted((TESTS / directory).glob("test_*.py")):
            out.append((f"{directory}/{path.name} alone", [str(path.relative_to(ROOT))]))
    return out


def main(extra: list[str]) -> int:
    failed = []
    for name, args in runs():
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, *extra],
                              cwd=ROOT, capture_output=True, text=True)
        summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"{name:45s} {time.perf_counter() - start:6.1f} s  {summary}", flush=True)
        if proc.returncode not in (0, 5):  # 5: nothing collected (a directory of slow tests only)
            failed.append(name)
            print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
    print("order independence:", "FAILED in " + ", ".join(failed) if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
