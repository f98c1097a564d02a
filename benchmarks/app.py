"""The app the speed benchmark serves: a trivial Starlette app, bare or gated.

QGDEV_BENCH_MODE=bare|gated QUEUEGATE_REDIS_URL=... uvicorn benchmarks.app:app
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from queuegate import QueueGate, Room

SECRET = "benchmark-secret-key-0123456789"

# Admitted visitors: room enough for everyone. Waiting and joining visitors:
# one admission an hour, so the line only grows. The big room is filled with
# a million waiting visitors by the benchmark itself.
ROOMS = [
    Room("bench-in", paths=["/page"], capacity=100_000_000, session=3600),
    Room("bench-wait", paths=["/wait"], rate=1, per=3600),
    Room("bench-join", paths=["/join"], rate=1, per=3600),
    Room("bench-big", paths=["/big"], rate=1000, per=3600, max_step=1000, status="paused"),
    # The turn benchmark: 4 admitted a second.
    Room("bench-turn", paths=["/turn"], rate=4, per=1, session=600, client_limit=0),
    # The console's pause and open (python -m benchmarks.reopen).
    Room("bench-reopen", paths=["/reopen"], rate=5, per=2, session=3600, client_limit=0),
    # Streams held open by the thousand (python -m benchmarks.streams).
    Room("bench-held", paths=["/held"], rate=4, per=1, session=3600, client_limit=0),
    # Open streams, far back: nobody is admitted.
    Room("bench-streams", paths=["/streams"], rate=1, per=3600, client_limit=0),
    # Leavers' streams at every rank of a long line (python -m benchmarks.leaving).
    Room("bench-leave", paths=["/leave"], rate=1, per=3600, client_limit=0),
    # Removed visitors whose admission every process copied: the room is
    # full and people wait, so a removed visitor who comes back waits.
    Room("bench-removed", paths=["/removed"], capacity=40, session=3600, client_limit=0),
    # The challenge benchmark: a proof of work before each place (difficulty
    # set by the benchmark at run time), room for everyone.
    Room("bench-human", paths=["/human"], capacity=100_000_000, client_limit=0, challenge=10_000),
]


async def page(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def held_stream(request: Request) -> StreamingResponse:
    """A bare Server-Sent Events response held open: one event, then
    nothing until the client leaves (what a stream costs without the gate)."""

    async def events() -> AsyncIterator[bytes]:
        yield b'event: waiting\ndata: {"state": "waiting"}\n\n'
        await asyncio.Event().wait()

    return StreamingResponse(events(), media_type="text/event-stream")


async def joins(request: Request) -> JSONResponse:
    """How this process's newcomers' joins went to Redis (queuegate.joins):
    joins answered by a shared call, the calls, and joins sent on to the
    full call; and requests answered from the process's copies; zeros when
    bare. For the speed benchmark's batch sizes."""
    store = getattr(app, "store", None)
    found = getattr(store, "joins", None)
    counts = {name: getattr(found, name, 0) for name in ("answered", "calls", "unsettled")}
    # Requests answered from the process's copies (benchmarks.instructions):
    # admitted visitors, and polls near the front of a line.
    counts["admissions_copied"] = getattr(getattr(store, "admissions", None), "hits", 0)
    counts["fronts_copied"] = getattr(getattr(store, "fronts", None), "hits", 0)
    return JSONResponse(counts)


# A join's answer as the gated server sent it (its status, headers and
# body), which the bare app sends again at ``GET /_bench/sample``: what
# sending the waiting page costs without any of the gate's work.
@dataclass
class Sample:
    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b"ok"


sample = Sample()


async def set_sample(request: Request) -> Response:
    given = await request.json()
    sample.status = int(given["status"])
    sample.headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in given["headers"]
        # (uvicorn writes its own date and server headers before the app's)
        if name.lower() not in ("content-length", "date", "server")
    ]
    sample.body = given["body"].encode()
    return Response(status_code=204)


async def sent_again(request: Request) -> Response:
    response = Response(sample.body, status_code=sample.status)
    response.raw_headers = [*sample.headers, (b"content-length", str(len(sample.body)).encode())]
    return response


bare = Starlette(
    routes=[
        Route("/sse", held_stream),
        Route("/_bench/joins", joins),
        Route("/_bench/sample", sent_again),
        Route("/_bench/sample", set_sample, methods=["POST"]),
        Route("/{name}", page),
    ]
)
app: ASGIApp


class CopiesSeen:
    """The gated app, and what this process's copies of admissions go through
    (python -m benchmarks.leaving): ``GET /_bench/copies/ROOM?v=A,B`` says,
    for each visitor, whether this process would pass them on its copy
    alone now, and when (``time.monotonic()``, the same clock in every
    process) it dropped its copy: on a revocation heard, or on losing its
    subscription (``lost`` counts those)."""

    def __init__(self, gate: QueueGate) -> None:
        self.gate = gate
        self.dropped: dict[tuple[str, str], float] = {}
        self.lost = 0
        # A copy goes early on a revocation heard, on the subscription lost,
        # or on a tick that found the room's state gone: the store hands
        # its subscription and its ticker a callback for each, and the probe
        # wraps those callbacks (a build compiled with mypyc lets no method
        # be replaced, so not the copies' own revoke and clear).
        store = gate.store
        invalidations, ticker = store.invalidations, store.ticker
        on_revoke, on_lost, on_gone = invalidations._on_revoke, invalidations._on_lost, ticker._on_lost

        def revoked(room: str, visitor: str, at_ms: int) -> None:
            self._dropping(room, visitor)
            on_revoke(room, visitor, at_ms)

        def lost() -> None:
            now = time.monotonic()
            self.lost += 1
            for key in store.admissions._until:
                self.dropped.setdefault(key, now)
            on_lost()

        def gone(room: str) -> None:
            self._dropping(room, "*")
            on_gone(room)

        invalidations._on_revoke = revoked
        invalidations._on_lost = lost
        ticker._on_lost = gone

    def _dropping(self, room: str, visitor: str) -> None:
        """The copies of ``visitor`` (``*``: every visitor) in ``room`` go now."""
        now = time.monotonic()
        held = [v for r, v in self.gate.store.admissions._until if r == room] if visitor == "*" else [visitor]
        for one in held:
            self.dropped.setdefault((room, one), now)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/_bench/copies/"):
            await self.gate(scope, receive, send)
            return
        room = scope["path"].rsplit("/", 1)[1]
        query = parse_qs(scope["query_string"].decode())
        visitors = [v for v in query.get("v", [""])[0].split(",") if v]
        copies = self.gate.store.admissions
        answer = {
            "live": self.gate.store.invalidations.live,
            "lost": self.lost,
            "held": {v: copies.admitted_until(room, v) is not None for v in visitors},
            "dropped": {v: self.dropped[(room, v)] for v in visitors if (room, v) in self.dropped},
        }
        await JSONResponse(answer)(scope, receive, send)


if os.environ.get("QGDEV_BENCH_LOG"):  # the gate's own log lines, to see what it went through
    logging.basicConfig(level=logging.INFO)


def gated(redis_url: str, timeout: float = 1.0) -> QueueGate:
    """The bare app behind the benchmarks' gate (``timeout``: Redis's, in
    seconds; longer under callgrind, where Python runs fifty times slower)."""
    return QueueGate(
        bare,
        rooms=ROOMS,
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        timeout=timeout,
        # The joining scenario's visitors come through "a proxy" on loopback,
        # each from another address (X-Forwarded-For).
        trusted_proxies=["127.0.0.1"],
    )


if os.environ.get("QGDEV_BENCH_MODE", "bare") == "gated":
    gate = gated(os.environ["QUEUEGATE_REDIS_URL"], float(os.environ.get("QGDEV_BENCH_TIMEOUT", "1.0")))
    app = CopiesSeen(gate) if os.environ.get("QGDEV_BENCH_COPIES") else gate
else:
    app = bare
