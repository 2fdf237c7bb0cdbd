"""The kernel-author walkthrough of docs/nki.md runs as written: its code blocks, in order, in one
namespace (write, simulate against NumPy, read the report, register with a backward, compile)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "nki.md"


def walkthrough_blocks() -> list[str]:
    text = DOC.read_text()
    start = text.index("## Kernel-author walkthrough")
    section = text[start:text.index("\n## ", start + 1)]
    return [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", section, re.S)]


def test_the_walkthrough_runs_as_written():
    blocks = walkthrough_blocks()
    assert len(blocks) == 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["xs"].grad is not None
