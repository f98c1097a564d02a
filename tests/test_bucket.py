"""Never more than N an interval, whatever the silence before a call.

The real scripts in a real server, on a simulated clock: Hypothesis draws
sequences of calls (joins, polls, ticks, releases, leaves, the operator's
pause, open, close and pass-through) with silences of every length between
them (none, a millisecond, just under and just over whole intervals, hours),
in every shape of room (a rate, a rate with a capacity, a capacity alone, a
lottery, a pre-queue). After each call the room's own count of admissions
is read; each interval of the bucket (from the room's first call, every
``per``) must have let at most ``rate`` in, and a room with a capacity never
holds more active sessions than it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuegate import Health, Room, Store
from queuegate.store import connect

T0 = 1_700_000_000_000
PER_MS = 2000
_rooms = itertools.count()


@dataclass(frozen=True)
class Shape:
    rate: int
    capacity: int = 0
    method: str = "fifo"
    opens_in_ms: int = 0  # a pre-queue that opens this long after T0
    target: bool = False  # follows health: a window's N released in steps of about a second


SHAPES = {
    "rate": Shape(rate=3),
    "rate-and-capacity": Shape(rate=3, capacity=4),
    "capacity": Shape(rate=0, capacity=3),
    "lottery": Shape(rate=2, method="random"),
    "prequeue": Shape(rate=3, opens_in_ms=5 * PER_MS + 700),
    "health": Shape(rate=7, target=True),
}


def most_an_interval(shape: Shape) -> int:
    """The most one interval may let in: N; in steps (advance.lua: step_n
    each step ms, a second's share of N rounded up, its step as long as
    that takes), as many steps as may start within an interval."""
    if not shape.target or PER_MS <= 1000:
        return shape.rate
    step_n = math.ceil(shape.rate * 1000 / PER_MS)
    step = math.ceil(PER_MS * step_n / shape.rate)
    return step_n * math.ceil(PER_MS / step)


# Silences between two calls: none, short, around whole intervals, long.
silences = st.one_of(
    st.just(0),
    st.integers(1, PER_MS - 1),
    st.builds(lambda k, d: max(0, k * PER_MS + d), st.integers(1, 6), st.sampled_from([-1, 0, 1])),
    st.integers(PER_MS, 50 * PER_MS),
    st.integers(3_600_000, 30 * 86_400_000),
)
operations = st.sampled_from(
    [
        *("join", "join", "join", "poll", "poll", "tick", "release", "leave"),
        *("paused", "open", "closed", "passthrough", "queue_all"),
    ]
)
steps = st.lists(st.tuples(silences, operations, st.integers(0, 1000)), min_size=5, max_size=40)


def make_room(shape: Shape) -> Room:
    return Room(
        f"bucket{next(_rooms)}",
        paths=["/x"],
        rate=shape.rate,
        per=PER_MS / 1000,
        capacity=shape.capacity,
        session=7 * PER_MS / 1000,
        method=shape.method,
        opens_at=(T0 + shape.opens_in_ms) / 1000 if shape.opens_in_ms else None,
        abandon=0,
        client_limit=0,
        target=Health(p95_ms=300) if shape.target else None,
    )


async def play(store: Store, shape: Shape, plan: list[tuple[int, str, int]]) -> None:
    room = make_room(shape)
    now = T0
    await store.stats(room, now=now)  # the room's first call: its bucket's intervals start here
    admitted = 0
    per_interval: Counter[int] = Counter()
    visitors: list[str] = []
    for silence, operation, pick in plan:
        now += silence
        if operation == "join":
            visitors.append(f"v{len(visitors)}")
            await store.enter(room, visitors[-1], now=now)
        elif operation in ("poll", "release", "leave") and visitors:
            visitor = visitors[pick % len(visitors)]
            if operation == "poll":
                await store.enter(room, visitor, now=now)
            elif operation == "release":
                await store.release(room, visitor, now=now)
            else:
                await store.leave(room, visitor, now=now)
        elif operation == "tick":
            await store.tick(room, "ticker", 2000, now=now)
        elif operation in ("paused", "open", "closed", "passthrough", "queue_all"):
            await store.configure(room, now=now, status=operation)
        stats = await store.stats(room, now=now)
        per_interval[(now - T0) // PER_MS] += stats["admitted"] - admitted
        admitted = stats["admitted"]
        if shape.capacity:
            assert stats["active"] <= shape.capacity, (now - T0, operation)
    if shape.rate:
        worst = max(per_interval.values(), default=0)
        assert worst <= most_an_interval(shape), sorted(per_interval.items())
        # And N an interval at most over the whole run (in steps too).
        intervals = (now - T0) // PER_MS + 1
        assert admitted <= shape.rate * intervals, (admitted, intervals)


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_never_more_than_n_an_interval(redis_url: str, shape: str) -> None:
    loop = asyncio.new_event_loop()
    store = Store(connect(redis_url, 5.0))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(plan=steps)
    def run(plan: list[tuple[int, str, int]]) -> None:
        loop.run_until_complete(play(store, SHAPES[shape], plan))

    try:
        run()
    finally:
        loop.run_until_complete(store.aclose())
        loop.close()


def test_a_long_silence_then_the_operators_console(redis_url: str) -> None:
    """The scenario that found the burst: 50 waiting in a room of 5 per 2 s,
    paused, opened 4.5 s later, closed 2.5 s later. No call between them
    lets more than 5 in an interval."""

    async def scenario() -> None:
        store = Store(connect(redis_url, 5.0))
        try:
            room = Room("console", paths=["/x"], rate=5, per=2.0, abandon=0, client_limit=0)
            for i in range(55):
                await store.enter(room, f"v{i}", now=T0)
            assert (await store.stats(room, now=T0))["admitted"] == 5
            await store.configure(room, now=T0 + 100, status="paused")
            await store.configure(room, now=T0 + 4600, status="open")
            opened = (await store.stats(room, now=T0 + 4600))["admitted"]
            assert opened == 10  # a full bucket at once: N more, and no more
            await store.configure(room, now=T0 + 7100, status="closed")
            closed = (await store.stats(room, now=T0 + 7100))["admitted"]
            assert closed - opened <= 5  # the interval from T0 + 6 s
        finally:
            await store.aclose()

    asyncio.run(scenario())
