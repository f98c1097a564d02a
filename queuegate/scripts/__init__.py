"""The Lua scripts that hold the queue's rules: which parts make each
script the store calls, and the constants Python reads from them so that
each is written once."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

__all__ = ["SCRIPTS", "SEEDING", "constant", "numbers", "script", "source"]


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


# Each operation is one script: the clock, the shared rules, its own part.
# enter's quick answers (inside, quick, quick_join) come before the set-up they skip.
SCRIPTS = {
    "enter": (
        "clock",
        "liveness",
        "inside",
        "estimate",
        "waiting",
        "quick",
        "analytics",
        "newcomers",
        "quick_join",
        "advance",
        "enter",
    ),
    "join": ("clock", "liveness", "estimate", "waiting", "analytics", "newcomers", "join"),
    "remove": ("clock", "liveness", "estimate", "analytics", "advance", "activity", "remove"),
    "stats": ("clock", "liveness", "estimate", "analytics", "advance", "stats"),
    "configure": ("clock", "liveness", "estimate", "analytics", "advance", "activity", "configure"),
    "drain": ("clock", "liveness", "estimate", "analytics", "advance", "activity", "drain"),
    "note": ("clock", "liveness", "estimate", "analytics", "advance", "activity", "note"),
    "health": ("clock", "liveness", "estimate", "analytics", "advance", "health"),
    "view": ("clock", "liveness", "estimate", "analytics", "advance", "view"),
    "tick": ("clock", "liveness", "estimate", "analytics", "advance", "tick"),
    "checkin": ("clock", "liveness", "checkin"),
    "places": ("clock", "liveness", "places"),
    "revoke": ("clock", "revoke"),
}

# The scripts that run advance.lua, which stores a room's lottery seed when
# the call offers one.
SEEDING = frozenset(name for name, parts in SCRIPTS.items() if "advance" in parts)


@cache
def script(name: str) -> str:
    """The text of the script ``name`` (``"enter"``): its parts in order."""
    return "\n".join(source(f"{part}.lua") for part in SCRIPTS[name])
