"""Figures the docs quote come from the runs that measured them: every benchmark section of
docs/benchmarks.md and every ``<!--fig:...-->`` figure (README.md, docs/*.md) equals its JSON, no
benchmark figure is typed outside them, and the lowering table's summary and count are current."""
import glob
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path):
    """A script of benchmarks/ or tools/ (not packages) as a module."""
    name = "_docs_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


results = _load("benchmarks/results.py")
RATIO = re.compile(r"\d(?:\.\d+)?x(?!\w)")
FIGURE = re.compile(r"\d(?:\.\d+)?x(?!\w)|\d(?:\.\d+)?\s?(?:ms|µs|us|s|%|min|minutes)(?!\w)")


def _outside_generated(text):
    return results.FIGURE.sub("", results.SECTION.sub("", text))


def test_pages_match_the_published_results():
    stale = results.refresh(check=True)
    assert not stale, f"{stale} disagree with docs/benchmarks/*.json or docs/operator-coverage.json: " \
                      "run `python benchmarks/results.py`"


def test_every_benchmark_has_a_results_section():
    """In docs/benchmarks.md, or the page about what it measures (docs/cost-model.md)."""
    sections = set()
    for page in results.PAGES:
        with open(page) as f:
            sections |= {m[2] for m in results.SECTION.finditer(f.read())}
    scripts = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))
               if "results.publish(" in open(p).read()}  # not the modules they share (results, ranks)
    assert sections == scripts


def test_no_typed_benchmark_figures():
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        typed = FIGURE.findall(_outside_generated(f.read()))
    assert not typed, f"docs/benchmarks.md types figures by hand: {typed}"
    with open(os.path.join(ROOT, "README.md")) as f:
        typed = RATIO.findall(_outside_generated(f.read()))
    assert not typed, f"README.md types ratios by hand (quote them with <!--fig:...-->): {typed}"


def test_figure_markers_name_existing_figures(tmp_path, monkeypatch):
    """A marker whose JSON exists must name one of its figures (a typo would otherwise keep the
    old text); a missing JSON renders as not measured yet."""
    (tmp_path / "r.json").write_text('{"figures": {"ratio": "1.50x"}}')
    monkeypatch.setattr(results, "ROOT", str(tmp_path))
    page = tmp_path / "page.md"
    page.write_text("a <!--fig:r.json#ratio-->old<!--/fig--> b <!--fig:none.json#x-->old<!--/fig-->")
    monkeypatch.setattr(results, "PAGES", [str(page)])
    assert results.refresh() == ["page.md"]
    assert page.read_text() == (f"a <!--fig:r.json#ratio-->1.50x<!--/fig--> "
                                f"b <!--fig:none.json#x-->{results.NOT_MEASURED}<!--/fig-->")
    page.write_text("<!--fig:r.json#typo-->old<!--/fig-->")
    try:
        results.refresh()
    except KeyError as exc:
        assert "typo" in str(exc)
    else:
        raise AssertionError("a marker naming a missing figure was accepted")


def test_lowering_table_summary_and_readme_count_are_current():
    stale = _load("tools/lowering_report.py").write(check=True)
    assert not stale, f"{stale}: run `python tools/lowering_report.py --write`"
