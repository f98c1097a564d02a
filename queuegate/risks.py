"""What a change of a room's settings does that an operator may not have
meant, said from the room's figures just before and just after it (a typo
of ``--rate 1000000`` for ``--rate 100`` floods the app the gate is there
to protect). Advice, not rules: the change is made, and the console and
the back office say each risk beside what they applied."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .console import count

__all__ = ["RISKS_UNKNOWN", "risks"]

RAISE = 10  # a rate this many times the one before, in one change
SHORT_SESSION_MS = 30_000  # a session shorter than a visit of a page or two
# The change was made, and the room could not be read after it (each of
# the console and the back office adds where to check it).
RISKS_UNKNOWN = "the room could not be read after the change to say what it risks"


def _per_second(figures: Mapping[str, Any]) -> float:
    """The room's rate limit in admissions a second; 0 when it has none."""
    rate, per = int(figures["rate"]), int(figures["per"])
    return rate * 1000 / per if rate > 0 and per > 0 else 0.0


def _seconds(ms: float) -> str:
    seconds = ms / 1000
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:g} s"


def risks(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Each risk of going from ``before`` to ``after`` (a room's stats, as
    ``Store.stats`` gives them), in a sentence; none when nothing changed."""
    said = []
    was, now = _per_second(before), _per_second(after)
    waiting = int(before["waiting"])  # (after it, the raise may have let them in)
    # How soon the line goes in, said only where the rate alone decides it
    # (an open room without a capacity, not before its opening).
    by_rate = after["status"] == "open" and int(after["capacity"]) == 0 and not int(after["prequeue"])
    if was > 0 and now >= RAISE * was:
        rate, per = int(after["rate"]), int(after["per"])
        refills = math.ceil(waiting / rate)
        when = "at the next refill"
        if refills > 1:
            when = f"within {refills:,} refills ({_seconds(refills * per)})"
        line = f"; the {count(waiting, 'visitor')} waiting can {'all ' if waiting > 1 else ''}be in {when}"
        said.append(
            f"rate {rate:,} per {_seconds(per)} lets in {now / was:,.0f} times as many a second as before "
            f"({before['rate']:,} per {_seconds(int(before['per']))})" + (line if waiting and by_rate else "")
        )
    elif was > 0 and int(after["rate"]) == 0:
        bound = f"only the capacity ({int(after['capacity']):,} at once) bounds who is let in"
        said.append(f"rate 0: no limit by rate; {bound}")
    session = int(after["session"])
    if 0 < session < SHORT_SESSION_MS and session != int(before["session"]):
        said.append(
            f"session {_seconds(session)}: each visitor admitted from now on must queue again "
            f"{_seconds(session)} after coming in"
            + (", or after that long without a request (sliding)" if int(after["sliding"]) else "")
        )
    held, was_held = after.get("controlled") or "", before.get("controlled") or ""
    if held and was_held and held != was_held:
        # (`--rate 0` beside a capacity: the operator's capacity became the
        # controller's to move, without a word. A pin given back is not news.)
        value = int(after[held])
        said.append(f"the health controller now holds the {held} ({value:,}) and moves it from now on")
    ceiling, per, per_was = int(after.get("ceiling", 0)), int(after["per"]), int(before["per"])
    same_ceiling = ceiling == int(before.get("ceiling", 0))
    if (
        same_ceiling
        and ceiling > 0
        and int(after["rate"]) > 0
        and int(after.get("target_ms", 0)) > 0
        and (0 < per != per_was)
    ):
        # The controller's bounds are numbers of the room's units: the same
        # ceiling is now so many a new interval (a quota of 600 a minute,
        # 600 a second after `--per 1`).
        said.append(
            f"the controller's ceiling {ceiling:,} is now per {_seconds(per)} "
            f"(it was per {_seconds(per_was)}): {ceiling * 1000 / per:,.4g} a second at most, "
            f"where it was {ceiling * 1000 / per_was:,.4g}; give --ceiling with --per to keep the limit"
        )
    capacity, active = int(after["capacity"]), int(after["active"])
    if 0 < capacity < active and capacity < int(before["capacity"] or active):
        said.append(
            f"capacity {capacity:,} with {count(active, 'session')} active: nobody new is let in until "
            f"{count(active - capacity + 1, 'session')} end"
        )
    return said
