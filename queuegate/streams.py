"""Waiting pages pushed to, not polling: Server-Sent Events.

The scripts publish on ``<prefix>:{room}:moved`` whenever a room's line
moves (admissions, someone leaving, a drain, new settings). Each process
hears it on its one subscription (``queuegate.invalidations``, opened with
its first stream if not before) and wakes that room's open streams: the
process learns of a move once, not once per visitor. A woken stream asks for its visitor's place at once when
near the front (fewer than 20 ahead, or an estimated wait under 10 s), and
at most every quarter of its poll interval further back;
with or without a wake-up it asks at its poll interval, so a lost
subscription (Redis away, a Redis Cluster, where this client has no
pub/sub) degrades a stream to polling, never to silence.

Event format (``text/event-stream``): ``event: waiting`` with the same JSON
as the status endpoint, whenever it changes; then one ``event: state`` with
``{"state": "active", ...}`` (or ``closed``, ``none``, ``pass``) and the
stream ends. ``event: unavailable`` while Redis does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from .invalidations import Invalidations

__all__ = ["FRONT_MS", "FRONT_PLACES", "Wakeups", "events"]

# Near the front, a woken stream checks at once: fewer people ahead than
# FRONT_PLACES, or an estimated wait under FRONT_MS (or unknown). Both, since
# each misses a case: at 4 admissions a second 20 places are 5 s, and in a
# capacity room the estimate may be the bound of a whole session.
FRONT_PLACES = 20
FRONT_MS = 10_000
SUBSCRIBE_WAIT = 1.0  # seconds a new stream waits for the subscription at most


class Wakeups:
    """The process's subscription (``queuegate.invalidations``), fanned out
    to open streams."""

    def __init__(self, invalidations: Invalidations) -> None:
        self._invalidations = invalidations
        self._waiting: dict[str, set[asyncio.Event]] = {}
        invalidations.on_moved.append(self._moved)

    async def ready(self, seconds: float) -> None:
        """Wait (at most ``seconds``) until the subscription is up, so that a
        stream's first check is not followed by a move nobody hears of."""
        if self._invalidations.started:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._invalidations.subscribed.wait(), timeout=seconds)

    def watch(self, room: str) -> asyncio.Event:
        """An event set whenever ``room``'s line moves (until ``unwatch``)."""
        event = asyncio.Event()
        self._waiting.setdefault(room, set()).add(event)
        self._invalidations.start(wakeups=True)
        return event

    def unwatch(self, room: str, event: asyncio.Event) -> None:
        events = self._waiting.get(room)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiting[room]

    def _moved(self, room: str) -> None:
        for event in self._waiting.get(room, ()):
            event.set()


async def until_moved(event: asyncio.Event, seconds: float) -> bool:
    """Wait for a wake-up or ``seconds``; whether it was a wake-up."""
    try:
        await asyncio.wait_for(event.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


Check = Callable[[], Awaitable[tuple[str, str, int, bool]]]


async def events(wakeups: Wakeups, room: str, check: Check) -> AsyncIterator[dict[str, str]]:
    """The stream of one visitor. ``check()`` asks for the visitor's place:
    (event name, JSON data, poll interval in ms, near the front?); an event
    other than ``waiting`` or ``unavailable`` ends the stream."""
    event = wakeups.watch(room)
    last = ""
    await wakeups.ready(SUBSCRIBE_WAIT)
    try:
        while True:
            event.clear()
            name, data, poll_ms, front = await check()
            if name not in ("waiting", "unavailable"):
                yield {"event": name, "data": data}
                return
            if data != last:
                yield {"event": name, "data": data}
                last = data
            poll = poll_ms / 1000
            if await until_moved(event, poll) and not front:
                # Far back: a move rarely changes much; check less often.
                await asyncio.sleep(poll / 4)
    finally:
        wakeups.unwatch(room, event)
