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
time went with the data. A room that leaves the ticker is not forgotten:
its last incarnation is kept (``REMEMBERED`` rooms at most; for a room
with a ``forget`` time, until its keys may have expired by design), and
compared at the room's first tick when it is ticked again. So a loss while
nobody waits (Redis restarted overnight, before a sale) is logged too, at
the first tick after it: when somebody waits in the room again, when this
process copies one of its admissions, or when its settings change. Any
change of a room's settings ticks it once in every process (heard as the
revocation of its copies), so that each knows the incarnation the new
settings live in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections import OrderedDict
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
REMEMBERED = 10_000  # rooms no longer ticked whose last incarnation is kept


def _say_lost(name: str) -> None:
    """The room's state in Redis is not the one this process knew: say what
    went with it (once a loss, in each process that ticks the room)."""
    logger.warning(
        "queuegate: room %r lost its state in Redis (a restart of a Redis that keeps nothing on "
        "disk, FLUSHALL, a failover to an empty server, queuegate forget, or its keys expired): "
        "its line and the settings set at run time (rate, status, pins...) are gone: it starts "
        "again empty, its settings back to the code's, and its health controller starts over; "
        "`queuegate show %s` shows what it runs with now",
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
        self._incarnations: dict[str, str] = {}  # the rooms ticked: the incarnation last heard
        # Rooms no longer ticked: the last incarnation heard, and until when
        # (time.monotonic()) a different one means a loss; oldest first.
        self._remembered: OrderedDict[str, tuple[str, float]] = OrderedDict()
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
        heard, until = self._remembered.pop(name, ("", 0.0))
        if heard and time.monotonic() < until:
            self._incarnations[name] = heard  # compared at its first tick
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def poke(self, name: str) -> None:
        """The room's settings changed: tick it now (once, if nobody waits
        in it: this process then knows the incarnation they live in)."""
        if name in self._rooms:
            self._due[name] = 0.0
            self._wake.set()
        else:
            self.watch(name)

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
            # Known here by name only: it has no state, and a tick cannot
            # make it anew (a visitor's request will, from the code's).
            self._heard(name, "")
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
        self._heard(name, tick.incarnation)
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

    def _heard(self, name: str, incarnation: str) -> None:
        """The room's incarnation now ("": no state): one other than the
        one heard before is a loss, said here (holder or not)."""
        heard = self._incarnations.get(name, "")
        if heard and incarnation != heard:
            _say_lost(name)
        self._incarnations[name] = incarnation

    def _drop(self, name: str) -> None:
        room = self._rooms.get(name)
        heard = self._incarnations.get(name, "")
        for table in (self._rooms, self._due, self._keep, self._incarnations):
            table.pop(name, None)
        if heard:
            # A room with a forget time may lose its keys by design once
            # nobody calls for it that long (from its last call, at most a
            # lease before this): not a loss to report after that.
            forget = room.forget if room is not None and not isinstance(room, str) else 0
            until = time.monotonic() + forget - LEASE_MS / 1000 if forget else math.inf
            self._remembered[name] = (heard, until)
            while len(self._remembered) > REMEMBERED:
                self._remembered.popitem(last=False)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop([task])
