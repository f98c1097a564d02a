"""The README is the front door: its two commands are the ones CI and users
run, on its first screen; its quickstarts are the tested files in
docs/snippets/, word for word; its links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

DEMO = 'python3 -m venv .venv && .venv/bin/pip install -e ".[demo]" && .venv/bin/python -m demo_app'
TESTS = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/pytest'

FIRST_SCREEN_LINES = 40
# A block the README shows from a file: the file's path in a comment just
# before the fence, as the docs include it.
SHOWN = re.compile(r"<!-- (docs/snippets/[\w/]+\.py) -->\n```python\n(.*?)```", re.S)


def test_readme_first_screen_has_both_commands_and_the_picture() -> None:
    first_screen = "\n".join(README.splitlines()[:FIRST_SCREEN_LINES])
    assert first_screen.index(DEMO) < first_screen.index(TESTS)
    assert "docs/waiting-page.png" in first_screen
    assert (ROOT / "docs" / "waiting-page.png").stat().st_size > 10_000


def test_readme_is_a_front_door_not_a_notebook() -> None:
    assert len(README.splitlines()) <= 300  # the rest goes in docs/
    headings = re.findall(r"^## (.+)$", README, re.M)
    for needed in ("Install", "Quickstarts", "Settings at a glance", "Documentation"):
        assert needed in headings
    assert re.findall(r"^### (.+)$", README, re.M)[:3] == ["Starlette", "FastAPI", "Django"]


def test_readme_never_installs_queuegate_from_an_index() -> None:
    # queuegate is not on PyPI: it is installed from a clone or a built wheel.
    pages = [README, *(path.read_text() for path in (ROOT / "docs").rglob("*.md"))]
    for text in pages:
        for line in text.splitlines():
            for command in re.findall(r"pip install ([^#`]*)", line):
                for word in command.split():
                    assert not re.fullmatch(r"[\"']?queuegate\b.*", word), line
            assert "queuegate @" not in line
    assert 'pip install -e ".[demo]"' in README
    assert 'pip install "/tmp/wheels/queuegate-' in README  # a built wheel, into your app's venv


def test_readme_quickstarts_are_the_tested_snippet_files() -> None:
    shown = SHOWN.findall(README)
    snippets = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs" / "snippets").glob("*.py"))
    assert sorted(name for name, _ in shown) == snippets
    for name, code in shown:
        assert code == (ROOT / name).read_text(), f"README's copy of {name} differs from the file"
    # The docs site includes the same files.
    pages = "".join(path.read_text() for path in (ROOT / "docs").rglob("*.md"))
    for name in snippets:
        assert f'--8<-- "{name}"' in pages


def test_readme_links_lead_to_files() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README) + re.findall(r'src="([^"]+)"', README)
    local = [link for link in links if "://" not in link]
    assert len(local) > 20
    for link in local:
        assert (ROOT / link).exists(), link


def test_health_summary_links_to_its_own_page() -> None:
    section = README[README.index("## Admission that follows the app's health") :]
    section = section[: section.index("\n## ", 1)]
    assert "docs/guides/health.md" in section
    assert len(section.strip().splitlines()) <= 8
    assert (
        (ROOT / "docs" / "guides" / "health.md")
        .read_text()
        .startswith("# Admission that follows the app's health\n")
    )


def test_ci_runs_the_readme_test_command() -> None:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith(".venv/")]
    setup = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pip install" in line)
    venv, install, run = TESTS.split(" && ")
    assert setup == f"{venv} && {install}"
    assert lines[-1] == run
    # The documentation is built, strictly, before the tests.
    assert ".venv/bin/mkdocs build --strict" in lines[:-1]


def test_the_readme_says_as_long_for_the_tests_as_ci_measured() -> None:
    """The README said 10-20 minutes, development.md (with CI's runs)
    10-15, "as the README says"."""
    said = re.compile(r"(\d+)-(\d+) minutes on (?:2|two) cores")
    readme, development = said.search(README), said.search((ROOT / "docs" / "development.md").read_text())
    assert readme is not None
    assert development is not None
    assert readme.groups() == development.groups()


def test_every_picture_can_be_retaken_by_a_command() -> None:
    pages = [README, *(path.read_text() for path in (ROOT / "docs").rglob("*.md"))]
    pictures = {Path(name).name for text in pages for name in re.findall(r"[\w/.-]+\.png", text)}
    assert {"waiting-page.png", "back-office.png", "admin-dashboard.png"} <= pictures
    development = (ROOT / "docs" / "development.md").read_text()
    for picture in pictures:
        assert (ROOT / "docs" / picture).stat().st_size > 5_000, picture
        # The command that writes it names it in its docstring.
        module = "benchmarks.demo_loop" if picture == "adaptive-loop.png" else "demo_app.pictures"
        assert f"python -m {module}" in development
        source = (ROOT / Path(*module.split("."))).with_suffix(".py").read_text()
        assert f"``{picture}``" in source or f'"{picture}"' in source, (picture, module)


def test_the_api_pages_name_only_members_they_render() -> None:
    """A member a reference page lists but its class inherits (Store's from
    queuegate.operations and queuegate.readings) is left out of the page
    without a word unless the block asks for inherited members: the Store
    page had lost configure, release, drain and every read that way."""
    import importlib

    for page in (ROOT / "docs" / "reference").glob("*.md"):
        for block in re.split(r"^::: ", page.read_text(), flags=re.M)[1:]:
            target, _, options = block.partition("\n")
            listed = re.findall(r"^ {8}- (\w+)$", options.split("\n\n")[0], flags=re.M)
            module, _, name = target.strip().rpartition(".")
            owner = getattr(importlib.import_module(module), name)
            inherited = [m for m in listed if m not in vars(owner)]
            assert not inherited or "inherited_members: true" in options.split("\n\n")[0], (
                page.name,
                inherited,
            )
