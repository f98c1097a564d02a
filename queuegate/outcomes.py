"""What the scripts answer about a visitor, as Python values: ``Outcome``,
and the decoding of enter.lua's and join.lua's replies into it. Pure: the
store learns Redis's clock and keeps admissions from these."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["PAUSED_ETA", "Outcome", "State", "decode", "decode_joins", "text", "waiting"]

# The estimate the scripts give in a paused room (estimate.lua): no wait is
# known, and the page says the line is held and the place kept.
PAUSED_ETA = -2

State = Literal["active", "waiting", "prequeue", "closed", "pass", "none", "limited", "challenge"]


@dataclass(slots=True)
class Outcome:
    """What the line says about one visitor at ``now_ms`` (Redis time).

    ``visitor`` is the id answered for: another one than asked when an
    identified user already holds a place under it. ``rank`` is 0-based
    (``rank`` people are ahead); ``eta_ms`` is -1 when nothing bounds the
    wait, ``PAUSED_ETA`` when the room is paused. A ``prequeue`` outcome
    has ``opens_at_ms`` and ``seed_sha256``; a ``limited`` one (the client
    took too many new places) has in ``eta_ms`` the time until it may take
    more; a ``challenge`` one (a new place needs a proof of work) the
    difficulty asked; a ``closed`` one in ``poll_ms`` when to ask again.
    """

    state: State
    now_ms: int
    visitor: str
    expires_ms: int = 0
    rank: int = 0
    line: int = 0
    eta_ms: int = -1
    poll_ms: int = 0
    joined: bool = False
    method: str = "fifo"
    opens_at_ms: int = 0
    seed_sha256: str = ""
    difficulty: int = 0
    copyable: bool = False
    place: int = 0  # a waiting visitor's arrival number (their place in line)
    seen_ms: int = 0  # when the visitor's liveness was last recorded (Redis time)
    in_line: bool = False  # a ``closed`` outcome: the visitor holds a place, kept


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def waiting(
    now_ms: int,
    visitor: str,
    rank: int,
    line: int,
    eta_ms: int,
    poll_ms: int,
    joined: bool,
    method: str,
    place: int,
    seen_ms: int,
) -> Outcome:
    """A visitor in the line, whose liveness was last recorded at ``seen_ms``.

    Made with the fields by position (``tests/test_farback.py`` checks
    them against their names): a dataclass called with keywords makes a
    dict of them, and every poll and join makes one of these."""
    return Outcome(
        "waiting",
        now_ms,
        visitor,
        0,  # expires_ms
        rank,
        line,
        eta_ms,
        poll_ms,
        joined,
        method,
        0,  # opens_at_ms
        "",  # seed_sha256
        0,  # difficulty
        False,  # copyable
        place,
        seen_ms,
    )


def decode(reply: Sequence[Any]) -> Outcome:
    """An answer of enter.lua."""
    state, now_ms, who = text(reply[0]), int(reply[1]), text(reply[2])
    if state == "active":
        return Outcome(
            "active", now_ms, who, expires_ms=int(reply[3]), joined=reply[4] == 1, copyable=reply[5] == 1
        )
    if state == "waiting":
        rank, line, eta_ms, poll_ms = (int(value) for value in reply[3:7])
        return waiting(
            now_ms, who, rank, line, eta_ms, poll_ms, reply[7] == 1, text(reply[8]), int(reply[9]), now_ms
        )
    if state == "prequeue":
        return Outcome(
            "prequeue",
            now_ms,
            who,
            opens_at_ms=int(reply[3]),
            line=int(reply[4]),
            eta_ms=int(reply[3]) - now_ms,
            poll_ms=int(reply[5]),
            joined=reply[6] == 1,
            seed_sha256=text(reply[7]),
        )
    if state == "limited":
        return Outcome("limited", now_ms, who, eta_ms=int(reply[3]))
    if state == "challenge":
        return Outcome("challenge", now_ms, who, difficulty=int(reply[3]))
    if state == "closed":
        return Outcome("closed", now_ms, who, poll_ms=int(reply[4]), in_line=reply[3] == 1)
    return Outcome(state, now_ms, who)  # type: ignore[arg-type]


def decode_joins(reply: Sequence[Any], visitors: Sequence[str]) -> list[Outcome] | None:
    """join.lua's answers for ``visitors``, in order, as enter.lua's would
    be; ``None`` when the room was not settled. The reply is 1, the time,
    the room's method, the arrival counter and the line's length before
    the joins, then two numbers a join: wait and poll interval, or the
    client's time to wait and 0 for a client over its limit. Those who
    joined took the next arrival numbers and ranks, in order."""
    if reply[0] != 1:
        return None
    now_ms, method, place, rank, answers = int(reply[1]), text(reply[2]), reply[3], reply[4], reply[5]
    outcomes = []
    for i, visitor in enumerate(visitors):
        wait, poll = answers[2 * i], answers[2 * i + 1]
        if poll == 0:
            outcomes.append(Outcome("limited", now_ms, visitor, eta_ms=wait))
        else:
            place += 1
            outcomes.append(waiting(now_ms, visitor, rank, rank + 1, wait, poll, True, method, place, now_ms))
            rank += 1
    return outcomes
