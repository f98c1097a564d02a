"""Waiting pages pushed to: Server-Sent Events fed from the pushed room.

Every script that changes a room's line publishes what changed, once, on
``<prefix>:{room}:moved`` (``push()`` in advance.lua): who was admitted,
who left the line and their arrival numbers, how many were taken from its
head, its length and state, and its estimates by rank. Each process hears
it on its one subscription (``queuegate.invalidations``) and updates every
open stream of the room in memory, without a call:

- an admitted visitor's stream gets its turn (``event: state``, active) and
  ends; one who left (gave up, removed, skipped as gone, drained) gets
  ``state`` none and ends; a room closed or passed through ends them all;
- every other stream's rank goes down by those taken from the head and
  those who left ahead of it (a line only ever loses people ahead of a
  visitor that way: joins go to the back), and its estimate is read
  between the push's samples. Near the front (fewer than ``FRONT_PLACES``
  ahead, or under ``FRONT_MS``) each change is sent; further back at most
  every quarter of the poll interval.

So Redis's work per push does not grow with the number of open streams. A
stream asks Redis itself when it opens (its exact place; read again if a
push of the room came during the read), when a push cannot say (a shuffle
at a scheduled opening, a room whose data was lost, a subscription lost and
made again), and the room's streams record their visitors' liveness
together, one call per ``MAX_CHECK_IN`` visitors, often enough that none
counts as silent (checkin.lua). Without a subscription (a Redis Cluster,
Redis away) each stream asks at its poll interval: polling, never silence.

Each stream is its request's own coroutine and one task that notices the
client leaving; there is no queue: a stream holds only the latest event to
send, so a client that does not read costs one event, not a backlog.

Event format (``text/event-stream``): ``event: waiting`` with the same JSON
as the status endpoint, whenever it changes; then one ``event: state`` with
``{"state": "active", ...}`` (or ``closed``, ``none``, ``pass``) and the
stream ends. ``event: unavailable`` while Redis does not answer.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Send

from .farback import estimate_at
from .invalidations import Invalidations
from .outcomes import Outcome, State

__all__ = ["FRONT_MS", "FRONT_PLACES", "Feeds"]

logger = logging.getLogger("queuegate")

# Near the front every change is sent: fewer people ahead than FRONT_PLACES,
# or an estimated wait under FRONT_MS (or unknown). Both, since each misses
# a case: at 4 admissions a second 20 places are 5 s, and in a capacity
# room the estimate may be the bound of a whole session.
FRONT_PLACES = 20
FRONT_MS = 10_000
PING_SECONDS = 15.0  # a comment line this often keeps proxies from closing an idle stream
MAX_READS = 64  # streams of one process reading their place from Redis at once
MAX_CHECK_IN = 500  # visitors whose liveness one call records
READ_AGAIN = 3  # a read during which the room moved is made again this many times at most
UNAVAILABLE_SECONDS = 5.0  # a stream whose read failed reads again after this
SUBSCRIBE_WAIT = 1.0  # seconds a new stream waits for the subscription at most

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
PING = {"type": "http.response.body", "body": b": ping\n\n", "more_body": True}

Read = Callable[[], Awaitable[Outcome | None]]
Render = Callable[[Outcome | None], str]
CheckIn = Callable[[Any, Sequence[str]], Awaitable[tuple[int, set[str]]]]


class Stream:
    """One open stream: its visitor's place as last known, and the event
    waiting to be sent."""

    __slots__ = (
        "epoch", "final", "next_send", "pending", "place", "rank",
        "render", "shown", "stale", "visitor", "wake",
    )  # fmt: skip

    def __init__(self, render: Render) -> None:
        self.render = render
        self.visitor = ""
        self.place = 0  # arrival number
        self.rank = 0
        self.epoch = -1  # the subscription's epoch when the place was read
        self.stale = True  # the place must be read from Redis
        self.pending: tuple[str, str] | None = None  # (event, data) to send
        self.final = False  # the pending event ends the stream
        self.shown: tuple[int, int, int, int] | None = None  # rank, line, eta, poll last sent
        self.next_send = 0.0  # far back: no update before this (time.monotonic())
        self.wake: asyncio.Future[None] | None = None

    def send(self, event: str, data: str, *, final: bool = False) -> None:
        self.pending = (event, data)
        self.final = final
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def read_again(self) -> None:
        if not self.final:
            self.stale = True
            wake = self.wake
            if wake is not None and not wake.done():
                wake.set_result(None)


@dataclass
class Feed:
    """One room's open streams in this process, and what the last push said."""

    room: Any
    streams: dict[str, set[Stream]] = field(default_factory=dict)
    incarnation: str = ""
    abandon_ms: int = 0
    checking: asyncio.Task[None] | None = None

    def all(self) -> list[Stream]:
        return [stream for streams in self.streams.values() for stream in streams]


class Feeds:
    """The streams of one process, fed by the room pushes heard on
    ``invalidations``; ``check_in`` is ``Store.check_in``."""

    def __init__(self, invalidations: Invalidations, check_in: CheckIn) -> None:
        self._invalidations = invalidations
        self._check_in = check_in
        self._feeds: dict[str, Feed] = {}
        self._reads = asyncio.Semaphore(MAX_READS)
        invalidations.on_moved.append(self._pushed)
        invalidations.on_subscribed.append(self._subscribed)
        self.reads = 0  # places read from Redis by streams
        self.pushes = 0  # pushes applied to a room with streams

    def open_streams(self) -> int:
        return sum(len(feed.all()) for feed in self._feeds.values())

    async def serve(self, room: Any, read: Read, render: Render, receive: Receive, send: Send) -> None:
        """One visitor's stream of ``room``: ``read()`` asks Redis for their
        place (None: Redis did not answer), ``render(outcome)`` is the JSON
        the status endpoint would answer."""
        invalidations = self._invalidations
        invalidations.start(wakeups=True)
        if not invalidations.subscribed.is_set():
            # The first read after the subscription, so no push comes
            # unheard between them (one that does is read again for).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(invalidations.subscribed.wait(), timeout=SUBSCRIBE_WAIT)
        name: str = room.name
        stream = Stream(render)
        left = asyncio.ensure_future(_until_disconnect(receive))
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        try:
            while True:
                if stream.stale:
                    await self._read(name, room, stream, read)
                pending = stream.pending
                if pending is not None:
                    stream.pending = None
                    event, data = pending
                    body = f"event: {event}\ndata: {data}\n\n".encode()
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    if stream.final:
                        return
                woken = await self._wait(stream, left)
                if woken is False:
                    return
                if woken is None:
                    if (
                        not self._invalidations.subscribed.is_set()
                        or stream.epoch != self._invalidations.epoch
                    ):
                        stream.stale = True  # pushes may have gone unheard: ask
                    else:
                        await send(PING)
        except OSError:
            return  # the client went away mid-send
        finally:
            left.cancel()
            self._remove(name, stream)
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _wait(self, stream: Stream, left: asyncio.Future[None]) -> bool | None:
        """Until something is to be sent or read (True), the client has
        gone (False), or a while has passed with nothing (None)."""
        timeout = PING_SECONDS
        if stream.stale:
            timeout = UNAVAILABLE_SECONDS  # the last read failed
        elif not self._invalidations.subscribed.is_set() and stream.shown is not None:
            timeout = min(timeout, stream.shown[3] / 1000)  # no pushes: poll
        wake = stream.wake = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait((wake, left), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stream.wake = None
            woken = wake.done() and not wake.cancelled()
            wake.cancel()
        if left.done():
            return False
        return True if woken else None

    async def _read(self, name: str, room: Any, stream: Stream, read: Read) -> None:
        """The stream's place from Redis, and its event."""
        invalidations = self._invalidations
        outcome: Outcome | None = None
        for _ in range(READ_AGAIN):
            heard = invalidations.heard(name)
            async with self._reads:
                outcome = await read()
            self.reads += 1
            if outcome is None or invalidations.heard(name) == heard:
                break
        if outcome is None:
            stream.send("unavailable", stream.render(None))
            return  # still stale: read again later
        stream.stale = False
        if outcome.state != "waiting" and outcome.state != "prequeue":
            stream.send("state", stream.render(outcome), final=True)
            return
        stream.epoch = invalidations.epoch
        if stream.visitor != outcome.visitor:
            self._remove(name, stream)
            stream.visitor = outcome.visitor
        stream.place, stream.rank = outcome.place, outcome.rank
        self._add(name, room, stream)
        shown = (outcome.rank, outcome.line, outcome.eta_ms, outcome.poll_ms)
        if shown != stream.shown:
            stream.shown = shown
            stream.send("waiting", stream.render(outcome))
        stream.next_send = time.monotonic() + outcome.poll_ms / 4000

    def _add(self, name: str, room: Any, stream: Stream) -> None:
        feed = self._feeds.get(name)
        if feed is None:
            feed = self._feeds[name] = Feed(room, abandon_ms=round(getattr(room, "abandon", 0) * 1000))
            feed.checking = asyncio.ensure_future(self._check_ins(feed))
        feed.streams.setdefault(stream.visitor, set()).add(stream)

    def _remove(self, name: str, stream: Stream) -> None:
        feed = self._feeds.get(name)
        if feed is None:
            return
        streams = feed.streams.get(stream.visitor)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del feed.streams[stream.visitor]
        if not feed.streams:
            del self._feeds[name]
            if feed.checking is not None:
                feed.checking.cancel()

    def _subscribed(self) -> None:
        """A new subscription: pushes before it went unheard."""
        for feed in self._feeds.values():
            for stream in feed.all():
                stream.read_again()

    def _pushed(self, name: str, data: bytes) -> None:
        feed = self._feeds.get(name)
        if feed is None:
            return
        self.pushes += 1
        try:
            push = json.loads(data)
        except ValueError:
            push = None
        if not isinstance(push, dict):
            for stream in feed.all():
                stream.read_again()  # an older process's message: ask
            return
        _apply(feed, push, time.monotonic(), self._invalidations.epoch)

    async def _check_ins(self, feed: Feed) -> None:
        """Record the liveness of the room's waiting visitors, together,
        often enough that none counts as silent (a third of ``abandon``)."""
        while True:
            every = feed.abandon_ms / 6000 if feed.abandon_ms > 0 else 60.0
            await asyncio.sleep(max(1.0, every))
            if feed.abandon_ms <= 0:
                continue
            visitors = [v for v, streams in feed.streams.items() if any(not s.final for s in streams)]
            for first in range(0, len(visitors), MAX_CHECK_IN):
                batch = visitors[first : first + MAX_CHECK_IN]
                try:
                    _, gone = await self._check_in(feed.room, batch)
                except Exception as exc:  # the streams ask for themselves meanwhile
                    logger.debug("queuegate: streams' check-in failed (%s)", exc)
                    break
                for visitor in gone:  # a push about them went unheard: ask
                    for stream in feed.streams.get(visitor, ()):
                        stream.read_again()


def _apply(feed: Feed, push: dict[str, Any], now: float, epoch: int) -> None:
    """A room's push, applied to its streams (see the module)."""
    incarnation = str(push.get("i", ""))
    lost = bool(feed.incarnation) and incarnation != feed.incarnation
    feed.incarnation = incarnation
    feed.abandon_ms = int(push.get("ab", feed.abandon_ms))
    status = push.get("st", "open")
    everyone = feed.all()
    if lost or push.get("r") or status == "prequeue":
        for stream in everyone:
            stream.read_again()
        return
    at_ms = int(push.get("t", 0))
    if push.get("d") or status in ("closed", "passthrough"):
        state: State = "none" if push.get("d") else ("closed" if status == "closed" else "pass")
        for stream in everyone:
            stream.send("state", stream.render(Outcome(state, at_ms, stream.visitor)), final=True)
        return
    session = int(push.get("se", 0))
    for visitor in push.get("a") or ():
        for stream in feed.streams.get(visitor, ()):
            outcome = Outcome("active", at_ms, visitor, expires_ms=at_ms + session)
            stream.send("state", stream.render(outcome), final=True)
    for visitor in push.get("g") or ():
        for stream in feed.streams.get(visitor, ()):
            stream.send("state", stream.render(Outcome("none", at_ms, visitor)), final=True)
    taken = int(push.get("n", 0))
    left = sorted(seq for seq in push.get("s") or () if seq > 0)
    line = int(push.get("l", 0))
    method = str(push.get("m", "fifo"))
    samples = push.get("e") or ()
    ranks, etas, polls = samples[0::3], samples[1::3], samples[2::3]
    for stream in everyone:
        if stream.final or stream.stale:
            continue
        if stream.epoch != epoch:
            stream.read_again()  # pushes between its read and this one went unheard
            continue
        stream.rank = max(0, stream.rank - taken - bisect.bisect_left(left, stream.place))
        rank = stream.rank
        found = estimate_at(ranks, etas, polls, min(rank, ranks[-1])) if ranks else None
        eta, poll = found if found is not None else (-1, 5000)
        shown = (rank, max(line, rank + 1), eta, poll)
        if shown == stream.shown:
            continue
        front = rank < FRONT_PLACES or eta < FRONT_MS
        if not front and now < stream.next_send:
            continue
        stream.shown = shown
        stream.next_send = now + poll / 4000
        outcome = Outcome(
            "waiting",
            at_ms,
            stream.visitor,
            rank=rank,
            line=shown[1],
            eta_ms=eta,
            poll_ms=poll,
            method=method,
            place=stream.place,
        )
        stream.send("waiting", stream.render(outcome))


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
