"""The README opens with the two commands CI runs, and they install pinned versions only."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from pinned_versions import normalized, pins, readme_commands  # noqa: E402


def test_the_readme_opens_with_the_demo_and_the_test_command():
    readme = (ROOT / "README.md").read_text()
    demo, tests = readme_commands()
    assert demo.endswith("python examples/quickstart.py") and tests.endswith("python -m pytest -q")
    assert readme.index(demo) < 200


def test_ci_runs_exactly_the_readme_commands():
    """.ci/run's own extraction (awk over the README) yields the same two commands."""
    script = (ROOT / ".ci" / "run").read_text()
    extraction = re.search(r"mapfile -t commands < <\((.*)\)$", script, re.M).group(1)
    out = subprocess.run(["bash", "-c", extraction], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == readme_commands()


def test_every_package_a_command_names_has_an_exact_version():
    pinned = pins()
    assert pinned["torch"] == "2.13.0"
    for command in readme_commands():
        for install in re.findall(r"pip install ([^&]*)", command):
            assert "-c constraints.txt" in install, install
            words = install.replace("-c constraints.txt", "").split()
            for word in words:
                if word.startswith("-") or word.startswith("'") or word == ".":
                    continue  # options and the package itself ('.[test]', .)
                assert re.fullmatch(r"[A-Za-z][\w.-]*==[\w.+]+", word), f"{word} has no exact version"
                name, version = word.split("==")
                assert pinned[normalized(name)] == version
