"""The line moves on time, by itself.

A room's token bucket holds at most N (``advance.lua``): a refill nobody
calls for is lost, so the line must not wait for a visitor to ask. Each app
process ticks the rooms it has seen somebody wait in (and, from its start,
those of its own with somebody waiting: ``queuegate.startup``): at each moment a room
could change by itself (its next refill, the first session's end in a full
room, its opening; ``tick.lua`` says when), one call moves it. One process
a room does so, under a short lease in Redis (``SET NX PX``) that it renews
with each tick; the others ask whether the lease is free when it would end,
and one of them takes over within ``LEASE_MS`` of the holder stopping.
Nothing new to deploy, and the rules stay in the scripts: two processes
ticking together (a lease taken over mid-call) are two calls of
``advance``, which never admit more than the bucket holds.

A room leaves the ticker when its line is empty (a visitor who waits again
brings it back) and no copy of one of its admissions may still be used
here; new settings (a ``configure``, heard as a revocation of the room's
copies) tick it at once, and ``configure`` itself has already moved the
room under them.

Each tick also checks the room's *incarnation* (the Redis time its state
was made): a room whose data was lost (``FLUSHALL``, a restart or failover
to an empty server) has a new one, or none, and the tick that finds it
tells every process to drop its copies of the room (``tick.lua``). So a
copy outlives its room's data by at most one tick interval (``RENEW`` for
the holder, ``LEASE_MS`` for the others) plus the message's delivery.
Each process that finds it logs a warning: what an operator set at run
time went with the data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from .calls import RoomRef, StoreError, UnknownRoom
from .tasks import stop

__all__ = ["LEASE_MS", "Tick", "Ticker"]

logger = logging.getLogger("queuegate")

LEASE_MS = 2000  # a holder that stops is replaced within this
RENEW = LEASE_MS / 3000  # seconds between a holder's ticks at most (it renews the lease)
LATE = 0.002  # seconds after a due moment the tick is sent: never before it, in Redis time
RETRY = 0.5  # seconds before a tick that failed is tried again


def _say_lost(name: str) -> None:
    """The room's state in Redis is not the one this process knew: say what
    went with it (once a loss, in each process that ticks the room)."""
    logger.warning(
        "queuegate: room %r lost its state in Redis (a restart of a Redis that keeps nothing on "
        "disk, FLUSHALL, a failover to an empty server, or queuegate forget): its line starts "
        "empty, the settings set at run time (rate, status, pins...) are back to the code's, and "
        "its health controller starts again; `queuegate show %s` shows what it runs with now",
        name,
        name,
    )


class Tick(NamedTuple):
    """What a tick answered (see tick.lua)."""

    held: bool  # this process holds the lease, and moved the room
    at_ms: int  # Redis time
    due_ms: int  # when the room next changes by itself (held), or the lease ends; -1 = never
    waiting: int  # the line's length
    incarnation: str  # the room's ("" = it has no state)


TickCall = Callable[[RoomRef, str, int, str], Awaitable[Tick]]


class Ticker:
    """One process's ticks of the rooms it has seen somebody wait in.
    ``tick(room, holder, lease_ms, incarnation)`` is ``Store.tick``;
    ``on_lost(room)`` hears of a room whose state is gone (a room known
    only by name, which the tick cannot make anew)."""

    def __init__(self, tick: TickCall, on_lost: Callable[[str], None]) -> None:
        self.id = secrets.token_hex(8)
        self._tick = tick
        self._on_lost = on_lost
        self._rooms: dict[str, RoomRef] = {}
        self._due: dict[str, float] = {}  # room -> when to tick it next (time.monotonic())
        self._keep: dict[str, float] = {}  # room -> ticked at least until (time.monotonic())
        self._incarnations: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0  # calls made
        self.held = 0  # of which under this process's lease

    def watch(self, room: RoomRef, until: float = 0.0) -> None:
        """Somebody waits in ``room``, or a copy of one of its admissions
        may be used ``until`` (``time.monotonic()``): tick it (from a
        running event loop)."""
        name = room if isinstance(room, str) else room.name
        if until > self._keep.get(name, 0.0):
            self._keep[name] = until
        if name in self._rooms:
            if isinstance(self._rooms[name], str) and not isinstance(room, str):
                self._rooms[name] = room  # its defaults: a tick can make its state anew
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
            tick = await self._tick(room, self.id, LEASE_MS, self._incarnations.get(name, ""))
        except UnknownRoom:
            self._on_lost(name)
            self._drop(name)
            return
        except StoreError as exc:
            logger.debug("queuegate: tick of room %r failed (%s)", name, exc)
            self._due[name] = time.monotonic() + RETRY
            return
        except Exception:  # a bug must not stop every room's line: said, and tried again
            logger.exception("queuegate: tick of room %r failed", name)
            self._due[name] = time.monotonic() + RETRY
            return
        self.ticks += 1
        heard = self._incarnations.get(name, "")
        if heard and tick.incarnation != heard:
            _say_lost(name)
        self._incarnations[name] = tick.incarnation
        now = time.monotonic()
        if tick.waiting == 0 and now >= self._keep.get(name, 0.0):
            self._drop(name)
            return
        until = max(0.0, (tick.due_ms - tick.at_ms) / 1000) + LATE
        if tick.held:
            self.held += 1
            after = RENEW if tick.due_ms < 0 else min(RENEW, until)
        else:
            after = until  # when the holder's lease would end (it renews it long before)
        if name in self._due:
            self._due[name] = now + after

    def _drop(self, name: str) -> None:
        for table in (self._rooms, self._due, self._keep, self._incarnations):
            table.pop(name, None)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop([task])
