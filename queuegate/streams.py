"""Waiting pages pushed to: the Server-Sent Events response.

Each stream is its request's own coroutine (``serve``) and one task that
notices the client leaving; there is no queue: a stream holds only the
latest event to send (rendered when it is sent), so a client that does not
read costs one event, not a backlog, and a push costs the room's streams a
few integer operations each, not a page each. What a stream is told, and
when, is its source's (``queuegate.feeds``): the source reads its place,
sets the event due and wakes it; here the event is sent, with a comment
line every ``PING_SECONDS`` so proxies keep an idle stream open. Without
pushes (no subscription) a stream asks at its poll interval: polling, never
silence.

Event format (``text/event-stream``): ``event: waiting`` with the same JSON
as the status endpoint, whenever it changes; then one ``event: state`` with
``{"state": "active", ...}`` (or ``closed``, ``none``, ``pass``) and the
stream ends. ``event: unavailable`` once when Redis stops answering, then
the place again once it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.types import Receive, Send

from .outcomes import Outcome

__all__ = ["PING_SECONDS", "Read", "Source", "Stream", "serve"]

PING_SECONDS = 15.0  # a comment line this often keeps proxies from closing an idle stream
UNAVAILABLE_SECONDS = 5.0  # a stream whose read failed reads again after this

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]
PING = {"type": "http.response.body", "body": b": ping\n\n", "more_body": True}

Read = Callable[[], Awaitable[Outcome | None]]
Render = Callable[[Outcome | None], str]


class Stream:
    """One open stream: its visitor's place as last known, and the event
    waiting to be sent (an answer to render, or None for 'unavailable')."""

    __slots__ = (
        "epoch", "final", "gone", "next_send", "pending", "ping", "place", "rank",
        "shown", "stale", "timed_out", "unavailable", "visitor", "wake",
    )  # fmt: skip

    def __init__(self) -> None:
        self.visitor = ""
        self.place = 0  # arrival number
        self.rank = 0
        self.epoch = -1  # the subscription's epoch its rank is right for
        self.stale = True  # the place must be read from Redis
        # What to send: False nothing, True the place in `shown`, else this
        # answer (None: Redis did not answer). Built when it is sent, so that
        # nothing of it outlives the send (objects that live a while get
        # promoted and make the garbage collector's full passes more often).
        self.pending: Outcome | bool | None = False
        self.unavailable = False  # told 'unavailable', and nothing since
        self.ping = False  # a keep-alive comment is due
        self.gone = False  # the client left
        self.timed_out = False
        self.final = False  # the pending event ends the stream
        self.shown: tuple[int, int, int, int] | None = None  # rank, line, eta, poll last sent
        self.next_send = 0.0  # far back: no update before this (time.monotonic())
        self.wake: asyncio.Future[None] | None = None

    def send(self, outcome: Outcome | bool | None, *, final: bool = False) -> None:
        if self.final:
            return  # the stream's last event is chosen: nothing replaces it
        if outcome is None:
            if self.unavailable:
                return  # said once for an outage, not at every failed read
            self.unavailable = True
        else:
            self.unavailable = False
        self.pending = outcome
        self.final = final
        self.wake_up()

    def read_again(self) -> None:
        if not self.final:
            self.stale = True
            self.wake_up()

    def wake_up(self) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def left(self, _: object = None) -> None:
        self.gone = True
        self.wake_up()

    def time_out(self) -> None:
        self.timed_out = True
        self.wake_up()


class Source(Protocol):
    """What tells a stream where its visitor stands (``queuegate.feeds.Feeds``)."""

    async def ready(self) -> None:
        """Before the stream's first read."""

    def polling(self) -> bool:
        """No pushes: each stream asks at its poll interval."""

    def waiting(self, name: str, stream: Stream) -> Outcome:
        """The place the stream last showed, as an answer."""

    async def read(self, name: str, room: Any, stream: Stream, read: Read) -> None:
        """The stream's place from Redis, and its event."""

    def remove(self, name: str, stream: Stream) -> None:
        """The stream has ended."""


async def serve(source: Source, room: Any, read: Read, render: Render, receive: Receive, send: Send) -> None:
    """One visitor's stream of ``room``, told by ``source``: ``read()`` asks
    Redis for their place (None: Redis did not answer), ``render(outcome)``
    is the JSON the status endpoint would answer."""
    await source.ready()
    name: str = room.name
    stream = Stream()
    left = asyncio.ensure_future(_until_disconnect(receive))
    left.add_done_callback(stream.left)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    try:
        while True:
            if stream.stale:
                await source.read(name, room, stream, read)
            pending = stream.pending
            if pending is not False:
                stream.pending = False
                if pending is True:
                    pending = source.waiting(name, stream)
                await send(_event(pending, render))
                if stream.final:
                    return
            if stream.ping:
                stream.ping = False
                await send(PING)
            if not await _wait(source, stream):
                return
            if stream.timed_out:
                stream.timed_out = False
                if stream.visitor and source.polling():
                    stream.stale = True  # no pushes: poll
                elif not stream.stale:
                    stream.ping = True
    except OSError:
        return  # the client went away mid-send
    finally:
        left.cancel()
        source.remove(name, stream)
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _wait(source: Source, stream: Stream) -> bool:
    """Until something is to be sent or read, or the time is up (a
    stream in a room's feed is woken for its pings; one that is not, or
    polls, sets a timer); False when the client has gone."""
    if stream.gone:
        return False
    loop = asyncio.get_running_loop()
    timer = None
    if stream.stale:
        timer = loop.call_later(UNAVAILABLE_SECONDS, stream.time_out)  # the last read failed
    elif source.polling() and stream.shown is not None:
        timer = loop.call_later(stream.shown[3] / 1000, stream.time_out)  # no pushes: poll
    wake = stream.wake = loop.create_future()
    try:
        await wake
    finally:
        stream.wake = None
        if timer is not None:
            timer.cancel()
    return not stream.gone


def _event(outcome: Outcome | None, render: Render) -> dict[str, Any]:
    if outcome is None:
        name = "unavailable"
    elif outcome.state == "waiting" or outcome.state == "prequeue":
        name = "waiting"
    else:
        name = "state"
    body = f"event: {name}\ndata: {render(outcome)}\n\n".encode()
    return {"type": "http.response.body", "body": body, "more_body": True}


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
