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
from .calls import FAILURES, RoomRef, StoreError
from .connections import Client
from .outcomes import text
from .scripts import constant

__all__ = ["ACTIVITY_KEEP", "AT_ONCE", "Readings", "each_room"]

# The entries a room's activity log keeps (written in activity.lua).
ACTIVITY_KEEP = int(constant("activity.lua", "ACTIVITY_KEEP"))
AT_ONCE = 32  # rooms read together by each_room

T = TypeVar("T")


async def each_room(names: Sequence[str], read: Callable[[str], Awaitable[T]]) -> list[T]:
    """``read(name)`` of every room, in the order of ``names``, ``AT_ONCE``
    rooms at a time: sent together, they share round trips on a pipelined
    connection (a scrape or a console's view of every room takes a round
    trip or two, not one a room), and a keyspace of thousands of rooms
    does not open thousands of calls at once. The first failure is raised,
    and the reads not yet done are cancelled."""
    bound = asyncio.Semaphore(AT_ONCE)

    async def one(name: str) -> T:
        async with bound:
            return await read(name)

    reads = [asyncio.ensure_future(one(name)) for name in names]
    try:
        return await asyncio.gather(*reads)
    finally:
        for pending in reads:
            pending.cancel()


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
        waits = await self.guard(self.client.hgetall(base + "waits"))
        closed = minutes - 1
        rows = await self.guard(self.client.lrange(base + "minutes", -closed, -1)) if closed > 0 else []
        fields = ("an_start", "an_j", "an_a", "an_g", "an_ws", "an_wn", "an_eta")
        current = await self.guard(self.client.hmget(self.keys(name)[4], fields))
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
