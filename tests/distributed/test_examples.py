"""The distributed examples run under torchrun as documented (docs/distributed.md)."""
from __future__ import annotations

import re

import pytest
from launch import REPO_ROOT, torchrun


def losses(stdout: str) -> list[float]:
    return [float(v) for v in re.findall(r"loss (\d+\.\d+)", stdout)]


@pytest.mark.slow
@pytest.mark.parametrize("example,nproc", [("ddp.py", 2), ("fsdp2_tp.py", 4)])
def test_example_trains(tmp_path, example, nproc):
    result = torchrun(str(REPO_ROOT / "examples" / example), nproc, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    seen = losses(result.stdout)
    assert len(seen) >= 5 and seen[-1] < seen[0], result.stdout
