"""The README opens with the two commands CI runs, and they install pinned versions only."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:3]]


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


def test_every_install_is_constrained_and_every_requirement_is_pinned():
    constraints = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            constraints[name.lower().replace("_", "-")] = version
    assert constraints["torch"] == "2.13.0"
    for command in readme_commands():
        for install in re.findall(r"pip install ([^&]*)", command):
            assert "-c constraints.txt" in install, install
            for name in re.findall(r"(?:^|\s)([A-Za-z][\w-]*)(?=\s|$)", install.replace("-c constraints.txt", "")):
                assert name.lower() in constraints, f"{name} has no exact version in constraints.txt"
