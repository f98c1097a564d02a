"""The opt-in build with the request path compiled by mypyc
(docs/performance.md): queuegate says which one runs, and CI's compiled
run (QGDEV_COMPILED=required, .ci/run) checks that it runs the modules
the build compiles, not the Python files beside the tests."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import queuegate

ROOT = Path(__file__).resolve().parent.parent


def compiled_modules() -> list[str]:
    """The modules pyproject.toml's mypyc hook compiles, by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = project["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return [path.strip("/").removesuffix(".py").replace("/", ".") for path in hook["include"]]


def test_the_version_says_which_build_runs() -> None:
    # -P: not the Python files of the current directory (a clone's) first.
    shown = subprocess.run(
        [sys.executable, "-P", "-m", "queuegate", "--version"], capture_output=True, text=True, timeout=30
    )
    build = "the request path compiled with mypyc" if queuegate.COMPILED else "pure Python"
    assert shown.returncode == 0
    assert shown.stdout == f"queuegate {queuegate.__version__} ({build})\n"


def test_every_compiled_module_is_one_build_or_the_other() -> None:
    files = [importlib.import_module(name).__file__ or "" for name in compiled_modules()]
    compiled = [name.endswith(tuple(EXTENSION_SUFFIXES)) for name in files]
    assert compiled == [queuegate.COMPILED] * len(files), files


def test_no_build_leftovers_in_the_clone() -> None:
    """A compiled build made without HATCH_BUILD_CLEAN_HOOKS_AFTER leaves
    its .so files beside the clone's Python files, and every environment
    importing the clone (the editable one of the tests) would run stale
    compiled code unseen."""
    if Path(queuegate.__file__ or "").parent == ROOT / "queuegate":
        assert not queuegate.COMPILED, "compiled modules left in the clone by a build: remove its .so files"
        assert not list((ROOT / "queuegate").glob("*.so")), "a build's .so files left in the clone"


@pytest.mark.skipif(os.environ.get("QGDEV_COMPILED") != "required", reason="not the compiled run")
def test_the_compiled_run_runs_compiled() -> None:
    assert queuegate.COMPILED, f"{queuegate.__file__}: pure Python (the source tree shadows the install?)"
    assert Path(queuegate.__file__ or "").parent != ROOT / "queuegate"


def test_no_compiled_coroutine_awaits_inside_an_exception_handler_or_a_finally() -> None:
    # Compiled by mypyc (2.4.1), a coroutine suspended inside an except
    # block, a finally or an async with's exit leaves the exception being
    # handled as the thread's, and another compiled coroutine awaiting in a
    # finally (or an async with's exit) then raises it as its own: a
    # NoScriptError, then a CancelledError, ended the subscription's task.
    # Handled after the block instead (calls.py, store.py, endpoints.py);
    # invalidations.py, which needs both, is not compiled.
    found = []
    for name in compiled_modules():
        path = ROOT / (name.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text())):
            blocks = []
            if isinstance(node, ast.ExceptHandler):
                blocks = node.body
            elif isinstance(node, ast.Try):
                blocks = node.finalbody
            elif isinstance(node, ast.AsyncWith):
                found.append(f"{path.name}:{node.lineno}")
            for inner in (n for statement in blocks for n in ast.walk(statement)):
                if isinstance(inner, ast.Await | ast.AsyncWith | ast.AsyncFor):
                    found.append(f"{path.name}:{inner.lineno}")
    assert found == []
