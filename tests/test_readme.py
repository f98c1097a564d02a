"""The README's two commands are the ones CI and users run."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

DEMO = 'python3 -m venv .venv && .venv/bin/pip install -e ".[demo]" && .venv/bin/python -m demo_app'
TESTS = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/pytest'


def test_readme_first_screen_has_both_commands_and_the_picture() -> None:
    first_screen = README[: README.index("## How it works")]
    assert DEMO in first_screen
    assert TESTS in first_screen
    assert "docs/waiting-page.png" in first_screen
    assert (ROOT / "docs" / "waiting-page.png").stat().st_size > 10_000


def test_ci_runs_the_readme_test_command() -> None:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith(".venv/")]
    setup = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pip install" in line)
    venv, install, run = TESTS.split(" && ")
    assert setup == f"{venv} && {install}"
    assert lines[-1] == run
