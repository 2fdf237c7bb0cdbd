"""Compare two profiles (two runs), or one profile's estimated chip time on two generations:
deltas per module, operator and kernel."""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .profile_data import ProfileData

LEVELS = ("module", "operator", "kernel")


def _totals(data: ProfileData, generation: str | None, measured: bool) -> dict[tuple[str, str], int]:
    """(level, name) -> nanoseconds: measured device time, or estimated time on ``generation``.
    A module's name is its whole path."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    pending = [(data.hierarchy(generation), "")]
    while pending:
        node, path = pending.pop()
        for child in node["children"]:
            name = f"{path}/{child['name']}" if child["level"] == "module" and path else child["name"]
            if child["level"] in LEVELS:
                out[(child["level"], name)] += child["device_ns"] if measured else child["estimated_ns"]
            pending.append((child, name if child["level"] == "module" else path))
    return out


def compare(a: ProfileData, b: ProfileData | None, generation_a: str | None = None,
            generation_b: str | None = None) -> dict:
    """Rows of (level, name, A, B, B - A), largest change first. With ``b`` the two runs' measured
    device times; without it, ``a``'s estimated times on ``generation_a`` and ``generation_b``."""
    if b is None:
        if not (generation_a and generation_b):
            raise ValueError("compare: give another profile (other=KEY), or generation_a and generation_b")
        left, right = _totals(a, generation_a, False), _totals(a, generation_b, False)
        labels = (f"estimated on {generation_a}", f"estimated on {generation_b}")
    else:
        left, right = _totals(a, None, True), _totals(b, None, True)
        labels = (f"measured: {a.path.name}", f"measured: {b.path.name}")
    rows = [{"level": level, "name": name, "a_ns": left.get((level, name), 0), "b_ns": right.get((level, name), 0),
             "delta_ns": right.get((level, name), 0) - left.get((level, name), 0)}
            for level, name in sorted(set(left) | set(right))]
    rows.sort(key=lambda r: -abs(r["delta_ns"]))
    return {"a": labels[0], "b": labels[1], "rows": rows}
