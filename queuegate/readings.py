"""Operators' reads of the rooms' state in Redis: the activity log, the
lottery's seed, the first visitors, the wait analytics and the rooms' names.
They move nothing, so they are plain redis-py reads, not room scripts;
``Store`` has them (``store.analytics(...)``), beside the calls that move
the line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .analytics import summarise
from .calls import FAILURES, RoomRef, StoreError, UnknownRoom
from .connections import Client
from .outcomes import text
from .scripts import constant

__all__ = ["ACTIVITY_KEEP", "AT_ONCE", "Readings", "each_room"]

# The entries a room's activity log keeps (written in activity.lua).
ACTIVITY_KEEP = int(constant("activity.lua", "ACTIVITY_KEEP"))
# Rooms read together by each_room. A room's read (its stats script on the
# pipelined connection, its analytics in one pipeline of plain reads) takes
# at most one of the client's pooled connections at a time: 8 leaves the
# gate's default pool of 50 to its requests, and a Sentinel or Cluster pool,
# which refuses a call past its size ("Too many connections") instead of
# waiting, is never filled by a scrape.
AT_ONCE = 8

T = TypeVar("T")


async def each_room(names: Sequence[str], read: Callable[[str], Awaitable[T]]) -> dict[str, T]:
    """``read(name)`` of every room, by name in the order of ``names``,
    ``AT_ONCE`` rooms at a time: sent together, they share round trips on a
    pipelined connection (a scrape or a console's view of every room takes
    a round trip or two, not one a room), and a keyspace of thousands of
    rooms does not open thousands of calls at once.

    A room that is not there (``UnknownRoom``: gone between the scan that
    listed it and its read, by its ``forget`` time or ``queuegate forget``,
    or named by a caller before anybody used it) is left out: every caller
    shows the rooms there are. Any other failure (Redis down, slow, refusing)
    is raised, and the reads not yet done are cancelled."""
    bound = asyncio.Semaphore(AT_ONCE)

    async def one(name: str) -> tuple[str, T] | None:
        async with bound:
            try:
                return name, await read(name)
            except UnknownRoom:
                return None

    reads = [asyncio.ensure_future(one(name)) for name in names]
    try:
        done = await asyncio.gather(*reads)
    finally:
        for pending in reads:
            pending.cancel()
    return dict(pair for pair in done if pair is not None)


def aside_log(prefix: str) -> str:
    """The key of the log of what concerns no one room (``note_aside``)."""
    return f"{prefix}:admin:activity"


class Readings:
    """The reads, for ``Store``: its client, prefix and key names."""

    client: Client
    prefix: str
    keys: Callable[[str], tuple[str, ...]]
    _base: Callable[[str], str]

    async def activity(self, room: str, count: int = 50) -> list[dict[str, Any]]:
        """The room's activity log, newest first: who changed what, and when
        (``at``, Redis time in ms), whatever they changed it from."""
        raw = await self.guard(self.client.lrange(self._base(room) + "activity", 0, count - 1))
        return [{**json.loads(item), "room": room} for item in raw]

    async def latest_activity(self, count: int = 50) -> list[dict[str, Any]]:
        """The newest ``count`` entries of every room's activity log and of
        the log of what concerns no one room (their ``room``: None), newest
        first."""
        raw = await self.guard(self.client.lrange(aside_log(self.prefix), 0, count - 1))
        # Every entry of this list concerns no one room (older ones said so
        # with "-", which is also a room's name).
        entries = [{**json.loads(item), "room": None} for item in raw]
        for name in await self.room_names():
            entries += await self.activity(name, count)
        # Stable: entries of one log at the same millisecond keep their order.
        entries.sort(key=lambda entry: -entry["at"])
        return entries[:count]

    async def seed(self, room: RoomRef) -> str | None:
        """The room's secret seed, to publish after the draw so anyone can check it."""
        name = room if isinstance(room, str) else room.name
        value = await self.guard(self.client.hget(self.keys(name)[4], "seed"))
        return None if value is None else text(value)

    async def visitors(self, room: RoomRef, count: int = 10) -> dict[str, list[tuple[str, int]]]:
        """The first ``count`` waiting (id, arrival number) and active (id,
        expiry ms) visitors, for operators. Reads only; moves nothing."""
        name = room if isinstance(room, str) else room.name
        keys = self.keys(name)
        waiting = await self.guard(self.client.zrange(keys[1], 0, count - 1, withscores=True))
        active = await self.guard(self.client.zrange(keys[3], 0, count - 1, withscores=True))
        return {
            "waiting": [(text(m), int(score)) for m, score in waiting],
            "active": [(text(m), int(score)) for m, score in active],
        }

    async def analytics(self, room: RoomRef, minutes: int = 1440) -> dict[str, Any]:
        """Waits of those admitted and of those who gave up, the estimate's
        accuracy, and the last ``minutes`` one-minute points (the current,
        partial minute last); see ``queuegate.analytics``. Reads only."""
        name = room if isinstance(room, str) else room.name
        base = self._base(name)
        closed = minutes - 1
        fields = ("an_start", "an_j", "an_a", "an_g", "an_ws", "an_wn", "an_eta")
        # One round trip on one pooled connection (the keys share the room's
        # slot), not three: see AT_ONCE.
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(base + "waits")
        pipe.hmget(self.keys(name)[4], fields)
        if closed > 0:
            pipe.lrange(base + "minutes", -closed, -1)
        waits, current, *more = await self.guard(pipe.execute())
        rows = more[0] if more else []
        this_minute = None
        if current[0] is not None:
            this_minute = ",".join(
                text(value) if value is not None else ("-1" if field == "an_eta" else "0")
                for field, value in zip(fields, current, strict=True)
            )
        return summarise(
            {text(k): int(v) for k, v in waits.items()},
            [text(row) for row in rows],
            this_minute,
        )

    async def room_names(self) -> list[str]:
        """Every room with state in Redis under this prefix (template rooms too)."""
        names = set()
        pattern = f"{self.prefix}:{{*}}:state"
        try:
            async for key in self.client.scan_iter(match=pattern, count=1000):
                name = text(key)
                names.add(name[len(self.prefix) + 2 : -len("}:state")])
        except FAILURES as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc
        return sorted(names)

    async def guard(self, call: Any) -> Any:
        """Await a plain redis-py call; its failures become StoreError."""
        try:
            return await call
        except FAILURES as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc
