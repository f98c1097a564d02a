"""Admitted visitors decided in-process: a local copy of "visitor V of room
R is admitted until T" that Redis keeps coherent.

The rules stay in the scripts: an ``enter`` answer says whether its
admission may be copied (a fixed session, an anonymous visitor); the scripts
that end an admission early publish it (see ``queuegate.invalidations``,
whose subscription and lease this copy lives under), and the copy drops
what the process hears of. A session's end needs no message: the copy holds
its end, on this host's monotonic clock, counted from when the request was
*sent* (Redis ran the script after that, so the copy ends at or before the
session does, by at most the request's round trip plus the millisecond
Redis rounds to).

Two more races are closed:

- a revocation heard *before* the reply it concerns (two connections, no
  common order): each revocation is remembered with its Redis time for
  ``REMEMBER_MS``, and a reply read at or before it is not copied;
- a new subscription: revocations before it were not heard, so the copy is
  emptied when the last one was lost and no reply read before the new one
  is copied.

And for outages: each admission ended early that the process heard of
(a leave, a release, a remove) is remembered with its Redis time
(``ended_at``, the last ``MAX_ENTRIES``), and kept when the subscription is
lost: a visitor whose cookie still carries that admission is not let
through while Redis does not answer (queuegate.decisions). What the
process did not hear of (it ended while the subscription was down, or
after the outage began) it cannot know.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .invalidations import Invalidations

__all__ = ["LocalAdmissions"]

REMEMBER_MS = 30_000  # revocations remembered this long (more than any call's deadline)
MAX_ENTRIES = 100_000  # a bound on the copy: past it, the oldest half goes


class LocalAdmissions:
    """One process's copy of the admissions it has seen, kept coherent by
    Redis's revocation messages (heard through ``invalidations``, which
    calls ``revoke`` and ``clear``). ``redis_now`` gives Redis's time (ms)."""

    def __init__(
        self,
        invalidations: Invalidations,
        redis_now: Callable[[], int],
        *,
        on_reset: Callable[[str], None] | None = None,
    ) -> None:
        self._invalidations = invalidations
        self._on_reset = on_reset  # told of each room whose every copy goes (configure)
        self._redis_now = redis_now
        # (room, visitor) -> (the admission's end in Redis ms, its end on
        # time.monotonic(), never later than Redis's)
        self._until: dict[tuple[str, str], tuple[int, float]] = {}
        self._revoked: dict[tuple[str, str], int] = {}  # (room, visitor or "*") -> Redis ms
        # (room, visitor) -> when its admission was ended early (Redis ms),
        # oldest first: for outages, when no reply can say so.
        self._ended: dict[tuple[str, str], int] = {}
        self.hits = 0

    def admitted_until(self, room: str, visitor: str) -> int | None:
        """The end (Redis ms) of the visitor's admission if this process
        holds it and it has not ended; else None (ask Redis)."""
        copied = self._until.get((room, visitor))
        if copied is None:
            return None
        now = time.monotonic()
        if now > self._invalidations.fresh_until:
            self._until.clear()  # revocations may have gone unheard
            return None
        if now >= copied[1]:
            del self._until[(room, visitor)]
            return None
        self.hits += 1
        return copied[0]

    def copy(self, room: str, visitor: str, until_ms: int, read_at_ms: int, sent_at: float) -> bool:
        """Keep an admission Redis answered at ``read_at_ms`` (its time) for
        a request sent at ``sent_at`` (``time.monotonic()``), unless the
        subscription is down or a revocation at or after that time was
        heard. Whether it was kept."""
        invalidations = self._invalidations
        if not invalidations.live or read_at_ms < invalidations.live_since:
            return False  # unheard revocations may predate the subscription
        for key in ((room, visitor), (room, "*")):
            revoked = self._revoked.get(key)
            if revoked is not None and revoked >= read_at_ms:
                return False
        if len(self._until) >= MAX_ENTRIES:
            for key in list(self._until)[: MAX_ENTRIES // 2]:
                del self._until[key]
        # The script ran at or after sent_at, and Redis's millisecond is
        # rounded down: the session ends no earlier than this.
        self._until[(room, visitor)] = (until_ms, sent_at + (until_ms - read_at_ms - 1) / 1000)
        return True

    def forget(self, room: str, visitor: str) -> None:
        """This process ended the admission itself (release, leave)."""
        self._until.pop((room, visitor), None)
        self._ended_now(room, visitor, self._redis_now())

    def ended_at(self, room: str, visitor: str) -> int | None:
        """When (Redis ms) this process last heard that the visitor's
        admission was ended early, if it remembers; else None."""
        return self._ended.get((room, visitor))

    def _ended_now(self, room: str, visitor: str, at_ms: int) -> None:
        key = (room, visitor)
        self._ended.pop(key, None)  # (to the end: the newest)
        self._ended[key] = at_ms
        if len(self._ended) > MAX_ENTRIES:
            for old in list(self._ended)[: MAX_ENTRIES // 2]:
                del self._ended[old]

    def revoke(self, room: str, visitor: str, at_ms: int) -> None:
        if visitor == "*":
            for key in [key for key in self._until if key[0] == room]:
                del self._until[key]
            if self._on_reset is not None:
                self._on_reset(room)
        else:
            self._until.pop((room, visitor), None)
            self._ended_now(room, visitor, at_ms)
        self._revoked[(room, visitor)] = at_ms
        if len(self._revoked) > 10_000:
            horizon = self._redis_now() - REMEMBER_MS
            self._revoked = {key: at for key, at in self._revoked.items() if at >= horizon}

    def clear(self) -> None:
        """The subscription was lost: revocations may go unheard (those
        heard are still known: ``ended_at``)."""
        self._until.clear()
