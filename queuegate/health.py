"""What this process measures for rooms with a health target, and reports.

Every response the gate forwards for such a room (or, with
``Health(signal="app")``, every response it forwards at all) adds its time to
the first byte, its time to the end and whether it failed (5xx or an
exception) to a per-room tally. About once a second the tally goes to Redis in
one call (``health.lua``), which merges the reports of all processes and runs
the room's controller: the rule lives there, once, and no process leads. The
report also carries the ages of the requests still in flight, so a pile-up
shows before its slowest requests finish.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .decisions import admission
from .scripts import numbers
from .settings import Room
from .store import Store, StoreError
from .tasks import stop

__all__ = ["AGES_S", "BOUNDS_MS", "MEASURED_KEY", "HealthReports", "Tally", "visit_bucket"]

# Rooms that gating further in (a FastAPI dependency, a Django decorator)
# found a request to count for, for the measurement around the whole app.
MEASURED_KEY = "queuegate.measured"

logger = logging.getLogger("queuegate")

# The latency buckets' upper bounds (ms), read from health.lua; one more
# bucket holds everything slower.
BOUNDS_MS = numbers("health.lua", "BOUNDS")
# The visit's age buckets' upper ends (s), read from health.lua: one more
# bucket for older visits, and one for requests of no known visit.
AGES_S = numbers("health.lua", "AGES")
UNKNOWN_VISIT = len(AGES_S) + 1
REPORT_EVERY = 1.0  # seconds


def visit_bucket(age_ms: float | None) -> int:
    """The age bucket of a request whose visit began ``age_ms`` ago (None:
    a request of no visit the room admitted)."""
    if age_ms is None:
        return UNKNOWN_VISIT
    return bisect.bisect_left(AGES_S, age_ms / 1000)


@dataclass(slots=True)
class Tally:
    started: int = 0  # requests forwarded
    responses: int = 0
    errors: int = 0
    end: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    first_byte: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    # By the visit's age at the request's start (visit_bucket): requests
    # started, successful responses and their time (ms), three a bucket.
    visits: list[float] = field(default_factory=lambda: [0.0] * (3 * (UNKNOWN_VISIT + 1)))

    def start(self, age: int) -> None:
        self.started += 1
        self.visits[3 * age] += 1

    def add(self, first_byte_ms: float, end_ms: float, failed: bool, age: int = UNKNOWN_VISIT) -> None:
        self.responses += 1
        self.errors += failed
        self.end[bisect.bisect_left(BOUNDS_MS, end_ms)] += 1
        self.first_byte[bisect.bisect_left(BOUNDS_MS, first_byte_ms)] += 1
        if not failed:
            self.visits[3 * age + 1] += 1
            self.visits[3 * age + 2] += end_ms


class HealthReports:
    """The tallies of one process, and the task that reports them."""

    def __init__(self, store: Store, rooms: Iterable[Room]) -> None:
        self._store = store
        self.app_rooms = tuple(room for room in rooms if room.target and room.target.signal == "app")
        self._tallies: dict[Room, Tally] = {}
        # Requests forwarded and not finished: their start and rooms.
        self._flying: dict[int, tuple[float, tuple[Room, ...]]] = {}
        self._keys = itertools.count()
        self._task: asyncio.Task[None] | None = None

    async def forward(
        self, rooms: tuple[Room, ...], app: ASGIApp, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Run ``app`` for the request, measuring its response for ``rooms``."""
        start = time.perf_counter()
        first = 0.0
        status = 0
        key = next(self._keys)
        self._flying[key] = (start, rooms)
        ages = {room: self._visit_age(room, scope) for room in rooms}
        for room in rooms:
            self._tally(room).start(ages[room])

        async def timed_send(message: Message) -> None:
            nonlocal first, status
            if message["type"] == "http.response.start":
                first = time.perf_counter()
                status = message["status"]
            await send(message)

        failed = True
        try:
            await app(scope, receive, timed_send)
            failed = status >= 500
        finally:
            del self._flying[key]
            # Rooms that gating further in found count from here on; their
            # start too, so a room's started and finished requests match.
            for room in scope.get(MEASURED_KEY, ()):
                if room not in ages:
                    ages[room] = self._visit_age(room, scope)
                    self._tally(room).start(ages[room])
            self._add(ages, start, first, failed)

    def _visit_age(self, room: Room, scope: Scope) -> int:
        """The age bucket of the visit the request belongs to, for ``room``:
        known when the room admitted it and its session does not slide
        (then it began a session's length before it ends)."""
        found = admission(scope)
        if found is None or found.room != room.name or room.sliding:
            return visit_bucket(None)
        return visit_bucket(self._store.redis_now_ms() - (found.expires_ms - room.session * 1000))

    def _add(self, ages: dict[Room, int], start: float, first: float, failed: bool) -> None:
        if not ages:
            return
        end_ms = (time.perf_counter() - start) * 1000
        first_ms = (first - start) * 1000 if first else end_ms
        for room, age in ages.items():
            self._tally(room).add(first_ms, end_ms, failed, age)

    def _tally(self, room: Room) -> Tally:
        tally = self._tallies.get(room)
        if tally is None:
            tally = self._tallies[room] = Tally()
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._report_forever())
        return tally

    def in_flight(self) -> dict[Room, list[int]]:
        """The requests in flight now, by room, in buckets of their age."""
        now = time.perf_counter()
        out: dict[Room, list[int]] = {}
        for start, rooms in self._flying.values():
            bucket = bisect.bisect_left(BOUNDS_MS, (now - start) * 1000)
            for room in rooms:
                out.setdefault(room, [0] * (len(BOUNDS_MS) + 1))[bucket] += 1
        return out

    async def report(self) -> None:
        """Send what was measured since the last report, one call per room
        (with a request in flight, also a room that finished none)."""
        tallies, self._tallies = self._tallies, {}
        flying = self.in_flight()
        for room in flying.keys() - tallies.keys():
            tallies[room] = Tally()
        for room, tally in tallies.items():
            ages = flying.get(room)
            try:
                await self._store.report(
                    room,
                    tally.responses,
                    tally.errors,
                    tally.end,
                    tally.first_byte,
                    ages,
                    tally.started,
                    visits=tally.visits,
                )
            except StoreError as exc:
                # Lost, not retried: the controller holds without evidence.
                logger.debug("queuegate: health report for %r lost: %s", room.name, exc)

    async def _report_forever(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY)
            await self.report()

    async def aclose(self) -> None:
        if self._task is not None:
            await stop([self._task])
            self._task = None
