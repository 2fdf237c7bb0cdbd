"""The exact version of every package the README commands install: the `name==version` pins of
the commands themselves (the build tools and torch, installed first) and constraints.txt (all
the rest). `python tools/pinned_versions.py` (run by .ci/run after the commands) fails when an
installed distribution is not pinned at the version it has."""
from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def readme_commands() -> list[str]:
    """The README's first two ```bash blocks: the demo command and the test command."""
    readme = (ROOT / "README.md").read_text()
    return [block.split("```", 1)[0].strip() for block in readme.split("```bash\n")[1:3]]


def pins() -> dict[str, str]:
    """Package name -> exact version, from the README commands and constraints.txt."""
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found[normalized(name)] = version
    for command in readme_commands():
        for name, version in re.findall(r"([A-Za-z][\w.-]*)==([\w.+]+)", command):
            found[normalized(name)] = version
    return found


def unpinned_installed() -> list[str]:
    pinned = pins()
    wrong = []
    for dist in importlib.metadata.distributions():
        name = normalized(dist.metadata["Name"])
        if name in ("pip", "torch-neuronx-sim"):
            continue
        if pinned.get(name) != dist.version.split("+")[0]:  # torch 2.13.0+cpu is torch==2.13.0
            wrong.append(f"{name}=={dist.version} (pinned: {pinned.get(name)})")
    return wrong


if __name__ == "__main__":
    if wrong := unpinned_installed():
        sys.exit("installed without an exact version in the README or constraints.txt: " + ", ".join(wrong))
    print("every installed package has its version from the README or constraints.txt")
