"""What the waiting pages' streams are told: the pushed room, fed to them.

Every script that changes a room's line publishes what changed, once, on
``<prefix>:{room}:moved`` (``push()`` in advance.lua): who was admitted,
who left the line and their arrival numbers, how many were taken from its
head, its length and state, and its estimates by rank. Each process hears
it on its one subscription (``queuegate.invalidations``) and updates every
open stream (``queuegate.streams``) of the room in memory, without a call:

- an admitted visitor's stream gets its turn (``event: state``, active) and
  ends; one who left (gave up, removed, skipped as gone, drained) gets
  ``state`` none and ends; a room closed or passed through ends them all;
- every other stream's rank goes down by those taken from the head and
  those who left ahead of it (a line only ever loses people ahead of a
  visitor that way: joins go to the back), and its estimate is read
  between the push's samples. Near the front (fewer than ``FRONT_PLACES``
  ahead) each change is sent; further back at most every second or every
  half poll interval, whichever is longer (twice as fresh as polling).

So Redis's work per push does not grow with the number of open streams. A
stream asks Redis itself only when it opens (its exact place; read again if
a push of the room came during the read, or before it and was heard after
it: ``Invalidations.caught_up``) and when its visitor is no longer
in the line for a reason no push told (then its answer says what became of
them). Where pushes cannot say where everyone stands (a subscription lost
and made again, a shuffle at a scheduled opening, a room whose data was
lost) the room's streams *resync*: their visitors' ranks read together,
``MAX_BATCH`` a call (places.lua). The same call, every sixth of
``abandon``, records their liveness, so none counts as silent. A
subscription lost asks for a resync too: one that finds Redis away tells
the room's streams ``unavailable`` (once: they keep their place), and the
first place read after it, by a resync or a stream's own read, is sent
again even where it did not change. Without a
subscription (a Redis Cluster, Redis away) each stream asks at its poll
interval: polling, never silence.
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

from .farback import estimate_at
from .invalidations import Invalidations
from .outcomes import Outcome, State
from .streams import PING_SECONDS, Read, Stream

__all__ = ["FRONT_PLACES", "Feeds"]

logger = logging.getLogger("queuegate")

FRONT_PLACES = 20  # this near the front, every change is sent at once
# Further back, at most one update every FAR_EVERY seconds or half the poll
# interval, whichever is longer: twice as fresh as polling would be.
FAR_EVERY = 1.0
MAX_READS = 64  # streams of one process reading their place from Redis at once
MAX_BATCH = 500  # visitors whose ranks one resync call reads
READ_AGAIN = 3  # a read (or resync) during which the room moved is made again this many times at most
SUBSCRIBE_WAIT = 1.0  # seconds a new stream waits for the subscription at most
RESYNC_RETRY = 1.0  # seconds before a resync that could not finish is tried again
# Seconds between two resyncs that streams opened in a moving room ask for
# (their reads kept finding pushes they could not place): opened steadily,
# they would otherwise run a resync of every stream back to back.
RESYNC_GAP = 1.0
FLUSH = 0.25  # seconds between two updates of all of a room's streams

Places = Callable[[Any, Sequence[str]], Awaitable[tuple[int, str, list[tuple[int, int]]]]]
# Estimates by rank from a push: ranks, estimates (ms), poll intervals (ms).
Samples = tuple[Sequence[int], Sequence[int], Sequence[int]]


@dataclass
class Feed:
    """One room's open streams in this process, and what the last push said.

    A push costs the room's streams nothing each: a stream's ``rank`` is its
    rank as of the last *flush* (every ``FLUSH`` seconds, which brings every
    stream up to date and sends what is due), and the pushes since are
    summed here: ``taken`` from the head, and the arrival numbers that
    ``left`` (sorted). A stream's rank now is its rank less both (those who
    left ahead of it). Only the streams nearest the front (the lowest
    arrival numbers) are updated at each push."""

    room: Any
    streams: dict[str, set[Stream]] = field(default_factory=dict)
    places: list[int] = field(default_factory=list)  # the streams' arrival numbers, sorted
    at_place: dict[int, set[Stream]] = field(default_factory=dict)
    taken: int = 0
    left: list[int] = field(default_factory=list)
    moved: bool = False  # a push since the last flush
    owed: set[Stream] = field(default_factory=set)  # a change held back for next_send
    incarnation: str = ""
    abandon_ms: int = 0
    # The last push's figures: every stream's estimate comes from them.
    at_ms: int = 0
    method: str = "fifo"
    line: int = 0
    samples: Samples = ((), (), ())
    checking: asyncio.Task[None] | None = None
    resync_due: asyncio.Event = field(default_factory=asyncio.Event)
    resynced_at: float = 0.0  # time.monotonic() of the last resync
    resync_later: asyncio.TimerHandle | None = None

    def resync_soon(self) -> None:
        """A resync, RESYNC_GAP after the last at the soonest."""
        wait = self.resynced_at + RESYNC_GAP - time.monotonic()
        if wait <= 0:
            self.resync_due.set()
        elif self.resync_later is None or self.resync_later.cancelled():
            self.resync_later = asyncio.get_running_loop().call_later(wait, self._resync_now)

    def _resync_now(self) -> None:
        self.resync_later = None
        self.resync_due.set()

    def all(self) -> list[Stream]:
        return [stream for streams in self.streams.values() for stream in streams]

    def rank(self, stream: Stream) -> int:
        """The stream's rank now, by the pushes since the last flush."""
        return max(0, stream.rank - self.taken - bisect.bisect_left(self.left, stream.place))

    def since_flush(self, stream: Stream, rank: int) -> int:
        """A rank read now, as of the last flush (what ``stream.rank`` holds)."""
        return rank + self.taken + bisect.bisect_left(self.left, stream.place)

    def front(self, count: int) -> list[Stream]:
        """The streams of the ``count`` lowest arrival numbers."""
        return [stream for place in self.places[:count] for stream in self.at_place.get(place, ())]


class Feeds:
    """The streams of one process, fed by the room pushes heard on
    ``invalidations``; ``places`` is ``Store.places``."""

    def __init__(self, invalidations: Invalidations, places: Places) -> None:
        self._invalidations = invalidations
        self._places = places
        self._feeds: dict[str, Feed] = {}
        self._reads = asyncio.Semaphore(MAX_READS)
        invalidations.on_moved.append(self._pushed)
        invalidations.on_subscribed.append(self._resync_all)
        invalidations.on_unsubscribed.append(self._resync_all)
        self.reads = 0  # places read from Redis by one stream
        self.resyncs = 0  # resync calls (many streams each)
        self.pushes = 0  # pushes applied to a room with streams

    def open_streams(self) -> int:
        return sum(len(feed.all()) for feed in self._feeds.values())

    async def ready(self) -> None:
        """Before a stream's first read: the subscription (waited for at
        most ``SUBSCRIBE_WAIT``), so no push comes unheard between them (one
        that does is read again for)."""
        invalidations = self._invalidations
        invalidations.start(wakeups=True)
        if not invalidations.subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(invalidations.subscribed.wait(), timeout=SUBSCRIBE_WAIT)

    def polling(self) -> bool:
        """No pushes (no subscription): each stream asks at its poll interval."""
        return not self._invalidations.subscribed.is_set()

    def waiting(self, name: str, stream: Stream) -> Outcome:
        """The stream's place as its feed last showed it."""
        feed = self._feeds.get(name)
        assert stream.shown is not None
        rank, line, eta, poll = stream.shown
        at_ms, method = (feed.at_ms, feed.method) if feed is not None else (0, "fifo")
        return Outcome(
            "waiting", at_ms, stream.visitor, rank=rank, line=line, eta_ms=eta, poll_ms=poll,
            method=method, place=stream.place,
        )  # fmt: skip

    async def read(self, name: str, room: Any, stream: Stream, read: Read) -> None:
        """The stream's place from Redis, and its event."""
        invalidations = self._invalidations
        outcome: Outcome | None = None
        consistent = False
        for _ in range(READ_AGAIN):
            heard = invalidations.heard(name)
            async with self._reads:
                outcome = await read()
            self.reads += 1
            if outcome is None:
                break
            # The rank counts every push published before the read; those
            # heard after it would be counted again.
            consistent = await invalidations.caught_up() and invalidations.heard(name) == heard
            if consistent:
                break
        if outcome is None:
            stream.send(None)
            return  # still stale: read again later
        stream.stale = False
        if outcome.state != "waiting" and outcome.state != "prequeue":
            stream.send(outcome, final=True)
            return
        stream.epoch = invalidations.epoch
        if stream.visitor != outcome.visitor:
            self.remove(name, stream)
            stream.visitor = outcome.visitor
        stream.place = outcome.place
        feed = self._add(name, room, stream)
        stream.rank = feed.since_flush(stream, outcome.rank)
        if not consistent:
            feed.resync_soon()  # the room kept moving: shown now, set right by a resync
        shown = (outcome.rank, outcome.line, outcome.eta_ms, outcome.poll_ms)
        if shown != stream.shown or stream.unavailable:  # (after 'unavailable', the place again)
            stream.shown = shown
            stream.send(outcome)
        stream.next_send = time.monotonic() + max(FAR_EVERY, outcome.poll_ms / 2000)

    def _add(self, name: str, room: Any, stream: Stream) -> Feed:
        feed = self._feeds.get(name)
        if feed is None:
            feed = self._feeds[name] = Feed(room, abandon_ms=round(getattr(room, "abandon", 0) * 1000))
            feed.checking = asyncio.ensure_future(self._keep(name, feed))
        feed.streams.setdefault(stream.visitor, set()).add(stream)
        at = feed.at_place.get(stream.place)
        if at is None:
            at = feed.at_place[stream.place] = set()
            bisect.insort(feed.places, stream.place)
        at.add(stream)
        return feed

    def remove(self, name: str, stream: Stream) -> None:
        """The stream out of its room's feed; the feed ends with its last stream."""
        feed = self._feeds.get(name)
        if feed is None:
            return
        streams = feed.streams.get(stream.visitor)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del feed.streams[stream.visitor]
        at = feed.at_place.get(stream.place)
        feed.owed.discard(stream)
        if at is not None:
            at.discard(stream)
            if not at:
                del feed.at_place[stream.place]
                i = bisect.bisect_left(feed.places, stream.place)
                if i < len(feed.places) and feed.places[i] == stream.place:
                    del feed.places[i]
        if not feed.streams:
            del self._feeds[name]
            if feed.checking is not None:
                feed.checking.cancel()

    def _resync_all(self) -> None:
        """A subscription made (pushes before it went unheard) or lost (a
        resync of each room finds whether Redis answers, one call a room,
        not one a stream, and tells its streams when it does not)."""
        for feed in self._feeds.values():
            feed.resync_due.set()

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
            feed.resync_due.set()  # an older process's message: ask
            return
        if not _apply(feed, push, time.monotonic(), self._invalidations.epoch):
            feed.resync_due.set()

    async def _keep(self, name: str, feed: Feed) -> None:
        """The room's flushes, every ``FLUSH`` seconds; its resyncs when one
        is due, and every sixth of ``abandon`` (a check-in: no visitor with
        an open stream counts as silent, which takes a third)."""
        checked = pinged = time.monotonic()
        while True:
            try:
                checked, pinged = await self._keep_once(name, feed, checked, pinged)
            except Exception:  # a bug must not leave the room's streams unkept: said, and on
                logger.exception("queuegate: keeping room %r's streams failed", name)
                await asyncio.sleep(FLUSH)

    async def _keep_once(self, name: str, feed: Feed, checked: float, pinged: float) -> tuple[float, float]:
        """One turn of ``_keep``: when the last check-in and ping were."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(feed.resync_due.wait(), timeout=FLUSH)
        if time.monotonic() - pinged >= PING_SECONDS:
            pinged = time.monotonic()
            for stream in feed.all():
                stream.ping = True
                stream.wake_up()
        if not _flush(feed, time.monotonic(), self._invalidations.epoch):
            feed.resync_due.set()
        every = feed.abandon_ms / 6000 if feed.abandon_ms > 0 else 60.0
        if feed.resync_due.is_set() or time.monotonic() - checked >= max(1.0, every):
            feed.resync_due.clear()
            checked = feed.resynced_at = time.monotonic()
            if not await self._resync(name, feed):
                await asyncio.sleep(RESYNC_RETRY)
                feed.resync_due.set()
        return checked, pinged

    async def _resync(self, name: str, feed: Feed) -> bool:
        """Every waiting stream's rank from Redis, in batches; a batch
        during which the room moved is read again. Whether all were set."""
        invalidations = self._invalidations
        streams = [s for s in feed.all() if not s.final and not s.stale]
        done = True
        for first in range(0, len(streams), MAX_BATCH):
            batch = streams[first : first + MAX_BATCH]
            visitors = list({stream.visitor: None for stream in batch})
            for _ in range(READ_AGAIN):
                heard, epoch = invalidations.heard(name), invalidations.epoch
                try:
                    at_ms, incarnation, places = await self._places(feed.room, visitors)
                except Exception as exc:  # Redis away: the streams keep their place, and are told
                    logger.debug("queuegate: streams of room %r could not resync (%s)", name, exc)
                    for stream in streams:
                        stream.send(None)  # event: unavailable (once: Stream.send)
                    return False
                self.resyncs += 1
                feed.incarnation = incarnation or feed.incarnation
                # Turns and lost places are facts whenever they were read;
                # ranks only hold if no push came during the call, nor
                # before it unheard (it would be counted twice).
                consistent = await invalidations.caught_up() and invalidations.heard(name) == heard
                place_of = dict(zip(visitors, places, strict=True))
                now = time.monotonic()
                for stream in batch:
                    if stream.final or stream.stale:
                        continue
                    rank, until = place_of[stream.visitor]
                    if until > 0:  # admitted meanwhile: its turn
                        stream.send(Outcome("active", at_ms, stream.visitor, expires_ms=until), final=True)
                    elif rank < 0:
                        stream.read_again()  # no place: its own answer says what became of it
                    elif consistent:
                        stream.epoch = epoch
                        stream.rank = feed.since_flush(stream, rank)
                        _show(feed, stream, now)
                if consistent:
                    break
            else:
                done = False
        return done


def _show(feed: Feed, stream: Stream, now: float) -> None:
    """Queue the stream's place, by the room's last push, for sending: at
    once near the front, at most every FAR_EVERY (or half its poll
    interval) further back."""
    rank = feed.rank(stream)
    shown = stream.shown
    ranks = feed.samples[0]
    if ranks:
        found = estimate_at(*feed.samples, min(rank, ranks[-1]))
        eta, poll = found if found is not None else (-1, 5000)
    elif shown is not None:
        eta, poll = shown[2], shown[3]
    else:
        return
    new = (rank, max(feed.line, rank + 1), eta, poll)
    if new == shown and not stream.unavailable:  # (after 'unavailable', the place again)
        return
    if rank >= FRONT_PLACES and now < stream.next_send:
        feed.owed.add(stream)  # a later flush sends it
        return
    feed.owed.discard(stream)
    stream.shown = new
    stream.next_send = now + max(FAR_EVERY, poll / 2000)
    stream.send(True)


def _apply(feed: Feed, push: dict[str, Any], now: float, epoch: int) -> bool:
    """A room's push, applied to its streams (see the module). False when
    the streams must resync: the push cannot say where they stand."""
    incarnation = str(push.get("i", ""))
    lost = bool(feed.incarnation) and incarnation != feed.incarnation
    feed.incarnation = incarnation
    feed.abandon_ms = int(push.get("ab", feed.abandon_ms))
    status = push.get("st", "open")
    feed.moved = True
    if status == "prequeue":
        for stream in feed.all():
            stream.read_again()  # the pre-queue's answer is not made from pushes
        return True
    if lost or push.get("r"):
        return False
    at_ms = int(push.get("t", 0))
    if push.get("d") or status in ("closed", "passthrough"):
        state: State = "none" if push.get("d") else ("closed" if status == "closed" else "pass")
        for stream in feed.all():
            stream.send(Outcome(state, at_ms, stream.visitor), final=True)
        return True
    session = int(push.get("se", 0))
    for visitor in push.get("a") or ():
        for stream in feed.streams.get(visitor, ()):
            stream.send(Outcome("active", at_ms, visitor, expires_ms=at_ms + session), final=True)
    for visitor in push.get("g") or ():
        for stream in feed.streams.get(visitor, ()):
            stream.send(Outcome("none", at_ms, visitor), final=True)
    feed.taken += int(push.get("n", 0))
    for seq in push.get("s") or ():
        if seq > 0:
            bisect.insort(feed.left, seq)
    feed.at_ms, feed.line, feed.method = at_ms, int(push.get("l", 0)), str(push.get("m", "fifo"))
    e = push.get("e") or ()
    feed.samples = (e[0::3], e[1::3], e[2::3])
    # Those who may now be near the front; the rest at the next flush.
    gone = len(push.get("a") or ()) + len(push.get("g") or ())
    for stream in feed.front(FRONT_PLACES + gone):
        if not (stream.final or stream.stale) and stream.epoch == epoch:
            _show(feed, stream, now)
    return True


def _flush(feed: Feed, now: float, epoch: int) -> bool:
    """Every stream brought up to date with the pushes since the last
    flush, and sent what is due. False when some must resync (pushes since
    their rank was read went unheard)."""
    current = True
    for stream in feed.all() if feed.moved else list(feed.owed):
        if stream.final or stream.stale:
            feed.owed.discard(stream)
            continue
        if stream.epoch != epoch:
            current = False
            continue
        _show(feed, stream, now)
        stream.rank = feed.rank(stream)
    feed.taken = 0
    feed.left.clear()
    feed.moved = False
    return current
