"""The declarative expectations file: expected failures and skips, each with a category.

``expectations.json`` holds a list of entries::

    {"op": "nn.functional.dropout", "variant": "", "dtype": "*", "outcome": "skip",
     "category": "upstream-test-issue", "reason": "...", "samples": [0, 3]}

``op`` is the OpInfo name (``name`` without the variant), ``variant`` the OpInfo
``variant_test_name`` (``""`` for the default variant, ``"*"`` for every variant; default ``""``),
``dtype`` a dtype name such as ``"bfloat16"`` or ``"*"``, ``samples`` (optional) the sample
indices the entry applies to (default: all samples).

* ``skip``: the samples are not run; they are reported as ``skipped`` with the category.
* ``xfail``: the samples run. Failing samples (``mismatch``/``error``) become ``xfail``. If no
  sample the entry covers within an (op, variant, dtype) group fails, they all become ``xpass``,
  which the report and the CI test flag, so a fixed bug forces the entry's removal. A group cut
  at ``max_samples`` (its rows carry ``partial``) may not reach the failing samples, so it flags
  no ``xpass``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

CATEGORIES = (
    "unsupported-by-design",    # complex, sparse, nested, forward AD, ...
    "not-yet-lowered",          # the device lacks the operator or a feature of it (errors)
    "low-precision-tolerance",  # a documented numerical difference in bf16/fp16
    "upstream-test-issue",      # the OpInfo sample or reference itself is unsuitable
)
OUTCOMES = ("skip", "xfail")
DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expectations.json")


@dataclass(frozen=True)
class Expectation:
    op: str
    outcome: str
    category: str
    reason: str
    variant: str = ""
    dtype: str = "*"
    samples: tuple = field(default=())

    def matches(self, op: str, variant: str, dtype: str, sample: int | None = None) -> bool:
        if self.op != op or (self.variant != "*" and self.variant != variant):
            return False
        if self.dtype != "*" and self.dtype != dtype:
            return False
        if sample is not None and self.samples and sample not in self.samples:
            return False
        return True


def load(path: str | None = None) -> list[Expectation]:
    """Parse and validate the expectations file (ValueError on a malformed entry)."""
    with open(path or DEFAULT_PATH) as f:
        data = json.load(f)
    entries = data["expectations"] if isinstance(data, dict) else data
    result = []
    for i, e in enumerate(entries):
        where = f"expectation #{i} ({e.get('op')!r})"
        unknown = set(e) - {"op", "variant", "dtype", "outcome", "category", "reason", "samples"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        if e.get("outcome") not in OUTCOMES:
            raise ValueError(f"{where}: outcome must be one of {OUTCOMES}")
        if e.get("category") not in CATEGORIES:
            raise ValueError(f"{where}: category must be one of {CATEGORIES}")
        if not e.get("reason") or not e.get("op"):
            raise ValueError(f"{where}: 'op' and 'reason' are required")
        result.append(Expectation(op=e["op"], variant=e.get("variant", ""), dtype=e.get("dtype", "*"),
                                  outcome=e["outcome"], category=e["category"], reason=e["reason"],
                                  samples=tuple(e.get("samples", ()))))
    return result


def find(expectations, op, variant, dtype, sample=None, outcome=None):
    for e in expectations:
        if (outcome is None or e.outcome == outcome) and e.matches(op, variant, dtype, sample):
            return e
    return None


def apply(rows: list[dict], expectations) -> list[dict]:
    """Turn raw outcomes into xfail/xpass where an ``xfail`` entry covers them (in place)."""
    groups: dict[tuple, list[tuple[dict, Expectation]]] = {}
    for row in rows:
        if row["outcome"] not in ("pass", "mismatch", "error"):
            continue
        e = find(expectations, row["op"], row["variant"], row["dtype"], row["sample"], "xfail")
        if e is not None:
            groups.setdefault((row["op"], row["variant"], row["dtype"], id(e)), []).append((row, e))
    for members in groups.values():
        any_failed = any(row["outcome"] != "pass" for row, _ in members)
        complete = not any(row.get("partial") for row, _ in members)
        for row, e in members:
            if row["outcome"] != "pass":
                row["raw_outcome"], row["outcome"] = row["outcome"], "xfail"
                row["category"] = e.category
                row["message"] = f"expected: {e.reason} | got: {row['message']}"
            elif complete and not any_failed:
                row["raw_outcome"], row["outcome"] = "pass", "xpass"
                row["category"] = e.category
                row["message"] = f"marked xfail ({e.reason}) but every covered sample passes"
    return rows
