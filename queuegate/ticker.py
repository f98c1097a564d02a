"""The line moves on time, by itself.

A room's token bucket holds at most N (``advance.lua``): a refill nobody
calls for is lost, so the line must not wait for a visitor to ask. Each app
process ticks the rooms it has seen somebody wait in: at each moment a room
could change by itself (its next refill, the first session's end in a full
room, its opening; ``tick.lua`` says when), one call moves it. One process
a room does so, under a short lease in Redis (``SET NX PX``) that it renews
with each tick; the others ask whether the lease is free when it would end,
and one of them takes over within ``LEASE_MS`` of the holder stopping.
Nothing new to deploy, and the rules stay in the scripts: two processes
ticking together (a lease taken over mid-call) are two calls of
``advance``, which never admit more than the bucket holds.

A room leaves the ticker when its line is empty (a visitor who waits again
brings it back); new settings (a ``configure``, heard as a revocation of
the room's copies) tick it at once, and ``configure`` itself has already
moved the room under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from .calls import RoomRef, StoreError

__all__ = ["LEASE_MS", "Ticker"]

logger = logging.getLogger("queuegate")

LEASE_MS = 2000  # a holder that stops is replaced within this
RENEW = LEASE_MS / 3000  # seconds between a holder's ticks at most (it renews the lease)
LATE = 0.002  # seconds after a due moment the tick is sent: never before it, in Redis time
RETRY = 0.5  # seconds before a tick that failed is tried again

Tick = Callable[[RoomRef, str, int], Awaitable[tuple[bool, int, int, int]]]


class Ticker:
    """One process's ticks of the rooms it has seen somebody wait in.
    ``tick(room, holder, lease_ms)`` is ``Store.tick``."""

    def __init__(self, tick: Tick) -> None:
        self.id = secrets.token_hex(8)
        self._tick = tick
        self._rooms: dict[str, RoomRef] = {}
        self._due: dict[str, float] = {}  # room -> when to tick it next (time.monotonic())
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0  # calls made
        self.held = 0  # of which under this process's lease

    def watch(self, room: RoomRef) -> None:
        """Somebody waits in ``room``: tick it (from a running event loop)."""
        name = room if isinstance(room, str) else room.name
        if name in self._rooms:
            return
        self._rooms[name] = room
        self._due[name] = 0.0
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def poke(self, name: str) -> None:
        """The room's settings changed: tick it now if it is watched."""
        if name in self._rooms:
            self._due[name] = 0.0
            self._wake.set()

    @property
    def rooms(self) -> frozenset[str]:
        return frozenset(self._rooms)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic()
            due = [name for name, at in self._due.items() if at <= now]
            if due:
                await asyncio.gather(*(self._one(name) for name in due))
                continue
            later = min(self._due.values(), default=now + 3600) - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=later)

    async def _one(self, name: str) -> None:
        room = self._rooms.get(name)
        if room is None:
            return
        try:
            held, at, due, waiting = await self._tick(room, self.id, LEASE_MS)
        except StoreError as exc:
            logger.debug("queuegate: tick of room %r failed (%s)", name, exc)
            self._due[name] = time.monotonic() + RETRY
            return
        self.ticks += 1
        if waiting == 0:
            self._rooms.pop(name, None)
            self._due.pop(name, None)
            return
        now = time.monotonic()
        if held:
            self.held += 1
            after = RENEW if due < 0 else min(RENEW, max(0.0, (due - at) / 1000) + LATE)
        else:
            # When the holder's lease would end (it renews it long before).
            after = max(0.0, (due - at) / 1000) + LATE
        if name in self._due:
            self._due[name] = now + after

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
