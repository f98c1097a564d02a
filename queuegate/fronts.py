"""The front of each room's line, copied in-process and kept coherent by
Redis: polls near the front answered with their exact rank, no round trip.

A poll near the front asks Redis two plain commands today (is the room's
snapshot still good, and the visitor's ``ZRANK``: see ``queuegate.farback``).
While the room is settled nothing reorders the line's first places without
a script saying so: joins only add at the back, and every script that takes
someone out of the line (an admission, a skip, a leave, a removal, a drain)
or changes the room's settings publishes on ``<prefix>:{room}:moved``. So a
process may keep the first ``FRONT_PLACES`` visitor ids of the line, read
with the snapshot's end and settings, and answer a poll from them:

- a copy is made only under the subscription's lease (see
  ``queuegate.invalidations``), and only if no message of that room (nor a lost
  or new subscription) was heard between sending the read and reading its
  reply, so a change it does not show is still to be heard;
- it is used while the lease holds, until a message of the room is heard,
  and until the snapshot's end (Redis time, as the plain commands compare
  it): the first moment the room could change without a call, when the
  next poll goes to Redis and its full call moves the line;
- a visitor it does not hold (further back, or newer than the copy) asks
  Redis as before; in a short line that read also refreshes the copy;
- a room reads its front at most every ``MIN_READ_INTERVAL`` seconds (a
  read costs Redis about 11 µs, as much as four polls asked with the plain
  commands): in a line that moves faster than that, most polls ask as
  before and the copies cost next to nothing.

So a rank answered from a copy is the rank Redis would give, except between
a change and its message reaching this process (the same delivery bound as
a revoked admission's: ``python -m benchmarks.revocation``), and within the
lease (1 s) when the subscription is lost or Redis hangs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FRONT_PLACES", "Front", "FrontCopies"]

FRONT_PLACES = 500  # visitors at the head of a line a copy holds
MIN_READ_INTERVAL = 0.05  # seconds between reads of one room's front
MAX_ROOMS = 1_000  # a bound on the rooms with a copy (about 56 KB each): past it, all go


@dataclass(frozen=True, slots=True)
class Front:
    """The first places of one room's line, as read from Redis."""

    version: tuple[int, int]  # the line's version (Invalidations.line_version) when read
    until_ms: int  # the snapshot's end, Redis time
    defaults: bytes  # the settings the snapshot was taken with
    ranks: dict[str, int]  # visitor id -> rank
    whole: bool  # the copy holds the whole line as it was read


class FrontCopies:
    """One process's copies of its rooms' fronts (see the module)."""

    def __init__(self) -> None:
        self._fronts: dict[str, Front] = {}
        self._reading: set[str] = set()
        self._read_at: dict[str, float] = {}  # room -> when its last read was sent (monotonic)
        self.hits = 0  # polls answered from a copy
        self.reads = 0  # reads of a front sent to Redis

    def rank(
        self, room: str, visitor: str, version: tuple[int, int] | None, now_ms: int, defaults: bytes
    ) -> int | None:
        """The visitor's rank from the room's copy, if it holds it and the
        copy is still good at Redis time ``now_ms``; else None (ask Redis)."""
        front = self._fronts.get(room)
        if front is None:
            return None
        if version != front.version or now_ms >= front.until_ms or defaults != front.defaults:
            del self._fronts[room]
            return None
        rank = front.ranks.get(visitor)
        if rank is not None:
            self.hits += 1
        return rank

    def wants(self, room: str, version: tuple[int, int] | None) -> bool:
        """Should the next read of the room's front bring a copy: the
        subscription's lease holds, none is being read nor was in the last
        MIN_READ_INTERVAL, and there is no good copy (or the one there is
        holds the whole line, which grew)?"""
        if version is None or room in self._reading:
            return False
        if time.monotonic() - self._read_at.get(room, float("-inf")) < MIN_READ_INTERVAL:
            return False
        front = self._fronts.get(room)
        return front is None or front.version != version or front.whole

    def reading(self, room: str) -> None:
        self.reads += 1
        self._reading.add(room)
        if len(self._read_at) >= MAX_ROOMS:
            self._read_at.clear()
        self._read_at[room] = time.monotonic()

    def read(
        self,
        room: str,
        sent: tuple[int, int] | None,
        now: tuple[int, int] | None,
        until_ms: int,
        defaults: bytes,
        ids: Sequence[bytes],
    ) -> None:
        """Keep the front a read sent at line version ``sent`` brought, if
        the version is still ``sent`` now (nothing heard in between)."""
        self._reading.discard(room)
        if sent is None or now != sent:
            return
        if len(self._fronts) >= MAX_ROOMS:
            self._fronts.clear()
        ranks = {visitor.decode(): rank for rank, visitor in enumerate(ids)}
        self._fronts[room] = Front(sent, until_ms, defaults, ranks, len(ids) < FRONT_PLACES)

    def gave_up(self, room: str) -> None:
        """A read failed: the next one may try again."""
        self._reading.discard(room)

    def forget(self, room: str) -> None:
        self._fronts.pop(room, None)
