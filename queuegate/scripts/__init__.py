"""The Lua scripts that hold the queue's rules, and the constants Python
reads from them so that each is written once."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

__all__ = ["constant", "numbers", "source"]


@cache
def source(name: str) -> str:
    """The text of ``name`` (``"health.lua"``)."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def constant(script: str, name: str) -> str:
    """The value of ``local NAME = ...`` at the start of a line of ``script``:
    a number, or a ``{...}`` table as written."""
    found = re.search(rf"^local {name} = (\{{[^}}]*\}}|[\d.]+)", source(script), re.M)
    assert found, f"{name} not found in {script}"
    return found.group(1)


def numbers(script: str, name: str) -> tuple[int, ...]:
    """A table of whole numbers, ``local NAME = {5, 10, ...}``, in ``script``."""
    return tuple(int(v) for v in re.findall(r"\d+", constant(script, name)))
