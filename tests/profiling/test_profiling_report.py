"""python -m torch_neuronx.profiling.report on a recorded profile, and its HTML in a real browser."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler

REPO = Path(torch_neuronx.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("profiles")
    nc = NeuronConfig(profile_output_dir=root)
    a = torch.randn(128, 128, device="neuron", dtype=torch.bfloat16)
    b = torch.randn(64, device="neuron", dtype=torch.float64)

    def step() -> None:
        (a @ a).relu().sum()
        b.exp()  # float64: a CPU fallback

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=nc,
                     on_trace_ready=NeuronProfiler(nc).export_trace,
                     schedule=torch.profiler.schedule(wait=0, warmup=0, active=2, repeat=1)) as prof:
            for _ in range(2):
                step()
                torch.neuron.synchronize()
                prof.step()
    return root


def run_report(directory: Path, *extra_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (*extra_path, REPO)))}
    return subprocess.run([sys.executable, "-m", "torch_neuronx.profiling.report", str(directory)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_report_command_prints_hotspots_fallbacks_and_estimates(profile_dir):
    result = run_report(profile_dir)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Hotspots by measured device time" in out and "aten::mm" in out
    assert "CPU fallbacks (1)" in out and "aten::exp" in out
    assert "ESTIMATED chip step time" in out and "ESTIMATED MFU" in out and "steps: 2" in out
    [run] = {p.parent for p in profile_dir.rglob("report.html")}
    assert (run / "report.png").stat().st_size > 0


def test_report_without_matplotlib_writes_text_and_html_and_names_the_extra(profile_dir, tmp_path):
    blocker = tmp_path / "matplotlib"  # found before the installed package: importing it fails
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib blocked by the test')\n")
    for old in profile_dir.rglob("report.*"):
        old.unlink()
    result = run_report(profile_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Hotspots by measured device time" in result.stdout
    assert "chart: not written: matplotlib is not installed" in result.stdout
    assert "torch-neuronx-sim[report]" in result.stdout
    [run] = {p.parent for p in profile_dir.rglob("report.html")}
    assert not (run / "report.png").exists()


def test_report_explains_a_missing_profile(tmp_path, capsys):
    from torch_neuronx.profiling import report
    assert report.main([str(tmp_path)]) == 2
    assert "no exported profile" in capsys.readouterr().err


@pytest.mark.slow
def test_report_html_renders_in_a_headless_browser(profile_dir, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no Chromium on PATH (Debian/Ubuntu: apt-get install chromium)")
    run_report(profile_dir)
    [page] = profile_dir.rglob("report.html")
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path}",
         "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert 'id="hotspots"' in dom and "aten::mm" in dom, result.stderr[-2000:]
    assert 'data-chart="loaded"' in dom  # the PNG chart decoded in the page
    assert 'id="fallbacks"' in dom and "aten::exp" in dom
