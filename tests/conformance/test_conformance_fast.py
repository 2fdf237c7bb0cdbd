"""The fast, deterministic OpInfo conformance subset (CI) and the expectations file's validity.

The full sweep is `python -m torch_neuronx.testing.conformance --workers 2 --summary docs/operator-coverage.md`
(see docs/operator-coverage.md); the slow test below runs a larger slice of it.
"""
import json

import pytest

from torch_neuronx.testing import conformance
from torch_neuronx.testing.conformance import expectations as exp, report, runner


def _describe(rows):
    return "\n".join(f"{report.key(r)} {r['dtype']} #{r['sample']} {r['outcome']} [{r['phase']}]: "
                     f"{r['message']}" for r in rows[:30])


def _check(rows):
    assert rows, "the conformance run produced no rows"
    mismatches = [r for r in rows if r["outcome"] == "mismatch"]
    errors = [r for r in rows if r["outcome"] == "error"]
    xpasses = [r for r in rows if r["outcome"] == "xpass"]
    assert not mismatches, "wrong answers not covered by expectations.json:\n" + _describe(mismatches)
    assert not errors, "unexpected errors:\n" + _describe(errors)
    assert not xpasses, ("samples marked xfail in expectations.json now pass (remove the entries):\n"
                         + _describe(xpasses))


def test_expectations_file_is_valid():
    entries = exp.load()
    with open(exp.DEFAULT_PATH) as f:
        raw = json.load(f)
    assert len(entries) == len(raw["expectations"])
    for e in entries:
        assert e.category in exp.CATEGORIES
        assert len(e.reason) > 10, f"{e.op}: give a precise reason"


def test_fast_subset():
    rows = conformance.run(subset="fast")
    _check(rows)
    s = report.summarize(rows)
    assert s["enabled"] > 300
    assert set(r["op"] for r in rows) >= {"add", "mm", "softmax", "nn.functional.layer_norm"}
    # Every enabled sample records where it ran.
    assert all(r["mode"] in ("native", "fallback") for r in rows if r["outcome"] in report.ENABLED)


def test_expectations_turn_failures_into_xfail_and_flag_xpass():
    rows = [
        {"op": "a", "variant": "", "dtype": "float32", "sample": 0, "outcome": "mismatch",
         "message": "m", "category": "", "phase": "forward"},
        {"op": "a", "variant": "", "dtype": "float32", "sample": 1, "outcome": "pass",
         "message": "", "category": "", "phase": ""},
        {"op": "b", "variant": "", "dtype": "bfloat16", "sample": 0, "outcome": "pass",
         "message": "", "category": "", "phase": ""},
    ]
    entries = [exp.Expectation(op="a", outcome="xfail", category="not-yet-lowered", reason="r"),
               exp.Expectation(op="b", dtype="bfloat16", outcome="xfail",
                               category="low-precision-tolerance", reason="r")]
    assert [r["outcome"] for r in exp.apply([dict(r) for r in rows], entries)] == ["xfail", "pass", "xpass"]
    # A group cut at max_samples may miss its failing samples: no xpass from it.
    rows[2]["partial"] = True
    assert [r["outcome"] for r in exp.apply(rows, entries)] == ["xfail", "pass", "pass"]


def test_summary_and_csv(tmp_path):
    rows = conformance.run(ops=["add", "nn.functional.silu"], dtypes=["float32", "float64"],
                           max_samples=2)
    csv_path = tmp_path / "results.csv"
    conformance.write_csv(rows, str(csv_path))
    back = conformance.read_csv(str(csv_path))
    assert len(back) == len(rows)
    md = tmp_path / "summary.md"
    conformance.write_markdown(back, str(md))
    text = md.read_text()
    assert "**Device: " in text and report.NUMERICS_NOTE in text and "Native vs fallback" in text
    # float64 runs on the host by policy: recorded as fallback with that reason.
    f64 = [r for r in rows if r["dtype"] == "float64" and r["outcome"] == "pass"]
    assert f64 and all(r["mode"] == "fallback" for r in f64)
    # silu.complex takes complex inputs only: skipped by design.
    assert any(r["category"] == "unsupported-by-design" for r in rows)
    # The chart degrades gracefully without matplotlib.
    conformance.write_chart(rows, str(tmp_path / "chart.png"))
    # Into an existing page: between its markers, one heading level down, the rest kept.
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\nintro\n\n{report.BEGIN}\nOLD-SECTION\n{report.END}\n\n## After\n")
    conformance.write_markdown(back, str(page))
    text = page.read_text()
    assert text.startswith("# Page\n\nintro\n") and text.endswith(f"{report.END}\n\n## After\n")
    assert "\n## Upstream conformance (OpInfo)" in text and "\n### Totals" in text
    assert "OLD-SECTION" not in text and "\n# the full sweep" in text  # code comments stay


def test_native_share_separates_by_design_fallbacks():
    def row(op, mode, reason=""):
        return {"op": op, "variant": "", "dtype": "float32", "sample": 0, "outcome": "pass", "mode": mode,
                "fallback_ops": "aten::x" if reason else "", "fallback_reason": reason, "category": ""}
    s = report.summarize([row("native", "native"), row("pinv", "fallback", runner.FLOAT64_INTERNAL_REASON),
                          row("missing", "fallback", runner.MISSING_REASON)])
    assert (s["ops_exercised"], s["ops_native"], s["ops_by_design"]) == (3, 1, 1)
    assert not s["ops_mode"]["missing"]["by_design"] and s["ops_mode"]["pinv"]["by_design"]


@pytest.mark.slow
def test_broader_sweep():
    """Every OpInfo operator, float32 and bfloat16, two samples each (several minutes)."""
    _check(conformance.run(dtypes=["float32", "bfloat16"], max_samples=2, workers=2))
