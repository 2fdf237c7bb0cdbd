"""The README's test command is the one CI runs."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```bash\n")[1:3]]
    ci_command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert blocks[1] == ci_command
    assert "examples/quickstart.py" in blocks[0]
    assert readme.index(blocks[0]) < 200  # the commands open the README
