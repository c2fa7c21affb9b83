"""The README's two commands: CI runs the test command line for line, and both
stay blocks of plain, short shell lines that paste into a fresh shell."""
import re

from tests.helpers.paths import REPO


def readme_block(label: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```bash\n# " + label + r":[^\n]*\n(.*?)```", readme, re.S)
    assert found, f"README.md has no ```bash block starting with '# {label}:'"
    return found.group(1)


def test_ci_runs_the_readme_test_command_line_for_line():
    assert readme_block("tests") in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_readme_commands_read_as_short_lines():
    for label in ("main job", "tests"):
        lines = readme_block(label).splitlines()
        assert lines[0].startswith("python3 -m venv .venv"), label
        assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]
