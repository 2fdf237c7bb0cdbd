"""docs/environment.md lists exactly the environment variables the code reads (NEURON_* and
TORCH_NEURONX_*), each with a default and a meaning."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"""["'`]((?:NEURON|TORCH_NEURONX)_[A-Z0-9_]+)["'`]""")


def read_by_the_code() -> set[str]:
    sources = [p for d in ("torch_neuronx", "nki", "vllm_neuron", "csrc") for p in (ROOT / d).rglob("*")
               if p.suffix in (".py", ".cpp", ".h")]
    return {name for p in sources for name in NAME.findall(p.read_text())}


def documented() -> dict[str, list[str]]:
    """Variable -> its table row's other cells (default, meaning)."""
    rows = {}
    for line in (ROOT / "docs" / "environment.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (m := re.fullmatch(r"`((?:NEURON|TORCH_NEURONX)_[A-Z0-9_]+)`", cells[0])):
            rows[m.group(1)] = cells[1:]
    return rows


def test_every_variable_the_code_reads_is_documented_and_nothing_else():
    from torch_neuronx.runtime.topology import _FOLDED  # refused with the setting to use instead
    code, docs = read_by_the_code() - set(_FOLDED), documented()
    assert len(code) > 10  # the scan finds them
    assert sorted(code - set(docs)) == [], "read by the code but not in docs/environment.md"
    assert sorted(set(docs) - code) == [], "documented but read nowhere"


def test_every_documented_variable_has_a_default_and_a_meaning():
    assert {name: cells for name, cells in documented().items() if not all(cells[:2])} == {}


def test_folded_variables_are_named_with_their_replacement():
    from torch_neuronx.runtime.topology import _FOLDED, SIM_CONF_KEYS
    text = (ROOT / "docs" / "environment.md").read_text()
    assert [name for name in _FOLDED if f"`{name}`" not in text] == []
    assert [key for key in SIM_CONF_KEYS if f"| `{key}` |" not in text] == []
