"""The Explorer's web UI in a real headless Chromium (Debian's chromium, driven by Playwright):
each view opened, an event clicked and followed to its source line, the idle-gap attribution
read, the generation switched, two profiles compared. Screenshots go to
``$EXPLORER_SCREENSHOT_DIR`` (docs/images/explorer for the docs) or the test's temporary folder."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH (Debian/Ubuntu: apt-get install chromium)")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def page(explorer_url, tmp_path_factory):
    shots = Path(os.environ.get("EXPLORER_SCREENSHOT_DIR") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(explorer_url)
        page.wait_for_selector("body[data-state=ready]", timeout=60_000)
        page.shots, page.errors = shots, errors
        yield page
        browser.close()
    assert not errors, errors


def tab(page, name: str) -> None:
    page.click(f"nav button[data-tab={name}]")


def test_summary_shows_estimated_utilisation_and_ranked_recommendations(page):
    tab(page, "summary")
    assert page.inner_text("#mfu").endswith("%")
    recommendations = page.inner_text("#recommendations")
    assert "aten::std falls back to the CPU" in recommendations
    assert "the host waits for the device every step" in recommendations
    assert "aten::std" in page.inner_text("#fallbacks")
    page.screenshot(path=page.shots / "explorer-summary.png")


def _click_event(page, name: str, timeline: str) -> int:
    """Clicks the widest drawn event called ``name`` on ``timeline``'s canvas (the easiest to hit);
    returns its id."""
    # Drawn, and no newer window on its way (a resize asks for one).
    page.wait_for_function(f"""() => {{ const tl = state.timelines['{timeline}'];
        return tl && tl.hits.length > 0 && tl.root.dataset.drawn === String(tl.request); }}""")
    x, y, event_id = page.evaluate(f"""() => {{
        const tl = state.timelines['{timeline}'];
        const row = tl.data.find((r) => r.events && r.events.some((e) => e[3] === {name!r}));
        const widest = (p, q) => (q[1] - q[0]) - (p[1] - p[0]);
        const ev = row.events.filter((e) => e[3] === {name!r}).sort(widest)[0];  // the easiest to hit
        const hit = tl.hits.find((h) => h[3] === ev[2]);
        return [(hit[0] + hit[1]) / 2, hit[2] + 6, ev[2]];
    }}""")
    box = page.locator(f"#{timeline}-timeline canvas").bounding_box()
    page.mouse.click(box["x"] + x, box["y"] + y)
    return event_id


def test_system_trace_click_an_event_and_follow_it_to_its_source_line(page):
    tab(page, "trace")
    clicked = _click_event(page, "aten::addmm", "trace")
    page.wait_for_selector(f"#detail[data-event='{clicked}']")
    assert page.inner_text("#detail-name") == "aten::addmm"
    module = page.evaluate(f"fetch('/api/event?id={clicked}').then((r) => r.json()).then((d) => d.event.module_path)")
    assert re.fullmatch(r"Model_0(/Sequential_0/Block_\d+)?/Linear_\d+", module)  # one of the Linears
    assert f"module {module}" in page.inner_text("#detail")
    page.screenshot(path=page.shots / "explorer-trace.png")
    link = page.locator("#detail-stack a.source-link").first
    line = int(link.get_attribute("data-line"))
    link.click()
    page.wait_for_selector(f"#source-code tr.selected[data-line='{line}']")
    text = page.inner_text(f"#source-code tr[data-line='{line}']")
    assert any(call in text for call in ("self.down(", "self.up(", "self.head("))  # the model's line
    assert page.inner_text("#line-title").startswith(f"line {line}:")
    page.screenshot(path=page.shots / "explorer-source.png")


def test_estimated_chip_timeline_changes_with_the_generation(page):
    tab(page, "chip")
    page.wait_for_function("document.querySelector('#chip-span').textContent.includes('trn2')")
    trn2 = page.inner_text("#chip-span")
    page.screenshot(path=page.shots / "explorer-chip-trn2.png")
    page.select_option("#generation", "trn3")
    page.wait_for_function("document.querySelector('#chip-span').textContent.includes('trn3')")
    assert page.inner_text("#chip-span") != trn2.replace("trn2", "trn3")  # re-timed: another span
    labels = page.evaluate("state.timelines.chip.rows.map((r) => r.label)")
    assert {"core 0 · TensorE", "core 0 · VectorE", "core 0 · DMA"} <= set(labels)
    _click_event(page, "aten::std", "chip")
    # The detail of the estimated activity (the fallback, on the Host lane) replaces the last one.
    page.wait_for_function("document.querySelector('#detail').innerText.includes('on Host (trn3)')")


def test_hierarchy_expands_modules_to_kernels(page):
    tab(page, "hierarchy")
    page.wait_for_selector("#hierarchy-table tr[data-node='/profile']")
    page.click("#hierarchy-table tr[data-node='/profile/Model_0']")
    page.wait_for_selector("#hierarchy-table tr[data-node='/profile/Model_0/Sequential_0']")
    page.click("#hierarchy-table th[data-sort='count']")
    page.screenshot(path=page.shots / "explorer-hierarchy.png")


def test_dependency_view_attributes_every_idle_gap(page):
    tab(page, "deps")
    page.wait_for_selector("#gap-totals .card[data-cause='host sync']")
    rows = page.inner_text("#gaps-table")
    assert "aten::item" in rows and "cpu fallback: aten::std" in rows
    # Inside the kernel-language kernel: its VectorE multiply waited for the DMA load of its tile.
    page.wait_for_selector("#kernel-waits-table tbody tr")
    waits = page.inner_text("#kernel-waits-table")
    assert "nki:scale_kernel" in waits and "DMA load at" in waits
    page.screenshot(path=page.shots / "explorer-dependencies.png")


def test_critical_path_lists_what_ifs(page):
    tab(page, "critical")
    page.wait_for_selector("#whatif-table tbody tr")
    text = page.inner_text("#whatif-table")
    for case in ("as measured", "kernels at their estimated trn3 time", "CPU fallbacks removed"):
        assert case in text
    assert page.locator("#critical-table tbody tr").count() > 0
    page.screenshot(path=page.shots / "explorer-critical-path.png")


def test_compare_trn2_with_trn3(page):
    tab(page, "compare")
    page.wait_for_selector("#compare-run")
    page.click("#compare-run")
    page.wait_for_selector("#compare-table[data-rows]")
    assert int(page.get_attribute("#compare-table", "data-rows")) > 0
    assert "nki:scale_kernel" in page.inner_text("#compare-table")
    page.screenshot(path=page.shots / "explorer-compare.png")
