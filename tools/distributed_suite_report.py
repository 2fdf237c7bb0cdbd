"""The report of PyTorch's distributed suite on the neuron backend (tests/upstream/distributed_suite.py):
docs/distributed-suite.json (the summary and every test's outcome) and the generated part of
docs/distributed-suite.md (pass rate over enabled tests, skips by category, failures by name).

    python tests/upstream/distributed_suite.py --json /tmp/suite.json
    python tools/distributed_suite_report.py /tmp/suite.json
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "docs" / "distributed-suite.json"
PAGE = ROOT / "docs" / "distributed-suite.md"
BEGIN, END = "<!-- BEGIN GENERATED: distributed suite -->", "<!-- END GENERATED: distributed suite -->"

# A skip's category, by its message: the first pattern that matches.
CATEGORIES = (
    ("CUDA only", re.compile(r"cuda|gpu|nvml|cudnn|tf32", re.I)),
    ("another backend's feature (NCCL, Gloo, MPI, UCC)",
     re.compile(r"nccl|gloo|\bmpi\b|\bucc\b|backend \w+ to be one of", re.I)),
    ("PyTorch's eligibility checks (world size, platform, known issues)",
     re.compile(r"world size|world_size|github\.com/pytorch|sandcastle|torchvision|dev-asan|windows|"
                r"not supported on|requires|deprecated|flaky", re.I)),
)
OTHER = "other"


def category(message: str) -> str:
    return next((name for name, pattern in CATEGORIES if pattern.search(message)), OTHER)


def _error_line(message: str) -> str:
    """The line naming the exception (the last such line), else the last line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Timeout)\b", line)]
    return (named or lines or [""])[-1][:300]


def summarize(raw: dict) -> dict:
    tests = raw["tests"]
    outcomes = Counter(t["outcome"] for t in tests.values())
    enabled = outcomes["pass"] + outcomes["fail"] + outcomes["error"]
    skips = Counter(category(t["message"]) for t in tests.values() if t["outcome"] == "skip")
    return {
        "world_size": raw["world_size"],
        "tests": len(tests),
        "enabled": enabled,
        "passed": outcomes["pass"],
        "failed": outcomes["fail"] + outcomes["error"],
        "skipped": outcomes["skip"],
        "pass_rate": f"{100 * outcomes['pass'] / enabled:.1f}%" if enabled else "n/a",
        "skips_by_category": dict(sorted(skips.items())),
        "failures": {name: _error_line(t["message"]) or t["outcome"]
                     for name, t in sorted(tests.items()) if t["outcome"] in ("fail", "error")},
        "outcomes": {name: t["outcome"] for name, t in sorted(tests.items())},
    }


def render(summary: dict) -> str:
    lines = [BEGIN, "",
             f"{summary['tests']} tests on {summary['world_size']} ranks: {summary['enabled']} enabled, "
             f"{summary['passed']} passed ({summary['pass_rate']} of the enabled), {summary['failed']} failed, "
             f"{summary['skipped']} skipped by the suite.", "",
             "| Skip category | Tests |", "|---|---|"]
    lines += [f"| {name} | {count} |" for name, count in summary["skips_by_category"].items()]
    if summary["failures"]:
        lines += ["", "| Failing test | Last line of its error |", "|---|---|"]
        lines += [f"| `{name}` | {message.replace('|', '/')} |" for name, message in summary["failures"].items()]
    return "\n".join(lines + ["", END])


def write(raw_path: str) -> None:
    summary = summarize(json.loads(Path(raw_path).read_text()))
    SUMMARY.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    page = PAGE.read_text()
    start, end = page.index(BEGIN), page.index(END) + len(END)
    PAGE.write_text(page[:start] + render(summary) + page[end:])


if __name__ == "__main__":
    write(sys.argv[1])
