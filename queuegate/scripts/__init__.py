"""The Lua scripts that hold the queue's rules: which parts make each
script the store calls, and the constants Python reads from them so that
each is written once."""

from __future__ import annotations

import hashlib
import re
from functools import cache
from importlib.resources import files

__all__ = ["LIBRARIES", "SCRIPTS", "SEEDING", "constant", "library", "numbers", "script", "source"]


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
    "forget": ("clock", "liveness", "estimate", "analytics", "advance", "forget"),
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


# Scripts also served as a function of a library of their own (Redis 7 or
# Valkey: FUNCTION LOAD, FCALL), where the functions of their parts are made
# once, when the library is loaded, instead of at every call: newcomers'
# joins sent together, and enter (a visitor's request or poll, and a join
# that is not sent with others).
LIBRARIES = ("join", "enter")
# A line of a part marked "per call" (see clock.lua), and the lines between
# "-- per call {" and "-- per call }", each alone on its line.
_PER_CALL = re.compile(r"^(local )?(.*?)\s*-- per call\b.*$")
_BLOCK = {"-- per call {": True, "-- per call }": False}


@cache
def library(name: str) -> tuple[str, str]:
    """The function ``name`` (``"join"``) as (function name, library code):
    its parts but the last at the library's top, their lines marked "per
    call" in a function of each part's own (``per_call_clock``: a function
    has at most 60 upvalues), called in order at the start of each call (a
    part's reply, such as clock.lua's LATE or a quick answer, is the
    call's), and the last part (the operation's own) as the function's
    body. A top-level ``local names = values`` marked is declared once and
    set at each call (to nil with no values). Both names carry the code's
    hash, so that app processes of different versions sharing a server each
    call their own."""
    parts = SCRIPTS[name]
    made: list[str] = []
    called: list[str] = []
    for part in parts[:-1]:
        per_call: list[str] = []
        block = False
        for line in source(f"{part}.lua").splitlines():
            if line.strip() in _BLOCK:
                block = _BLOCK[line.strip()]
                continue
            marked = None if block else _PER_CALL.match(line)
            if block:
                per_call.append(f"  {line}")
            elif marked is None:
                made.append(line)
            elif marked.group(1):  # local names = values: declared once, set at each call
                names, equals, values = marked.group(2).partition(" = ")
                made.append(f"local {names}")
                per_call.append(f"  {names} = {values if equals else 'nil'}")
            else:
                per_call.append(f"  {marked.group(2)}")
        assert not block, f"{part}.lua: a per call block is not closed"
        if per_call:
            made += [f"local function per_call_{part}()", *per_call, "end"]
            called.append(part)
    code = "\n".join(
        [
            "local KEYS, ARGV",
            *made,
            "local function run()",
            source(f"{parts[-1]}.lua"),
            "end",
            "@REGISTER",
        ]
    )
    digest = hashlib.sha1(code.encode()).hexdigest()[:16]
    function = f"queuegate_{name}_{digest}"
    register = "\n".join(
        [
            f"redis.register_function('{function}', function(keys, args)",
            "  KEYS, ARGV = keys, args",
            "  local reply",
            *(f"  reply = per_call_{part}() if reply ~= nil then return reply end" for part in called),
            "  return run()",
            "end)",
        ]
    )
    return function, f"#!lua name={function}\n" + code.replace("@REGISTER", register)
