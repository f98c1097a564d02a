"""The line moves by itself: nobody asks, and the room still admits at each
refill, under one process's lease; another takes over when it stops; new
settings move the room at once. Real time, a real server, two stores as
two app processes."""

from __future__ import annotations

import asyncio
import time

import pytest

from queuegate import Room, Store
from queuegate.store import connect
from queuegate.ticker import LEASE_MS

pytestmark = pytest.mark.anyio


async def active(store: Store, room: Room) -> int:
    """Admitted visitors, read without moving the line."""
    return len((await store.visitors(room, count=1000))["active"])


async def test_the_line_moves_with_nobody_asking(redis_url: str) -> None:
    first, second = Store(connect(redis_url, 5.0)), Store(connect(redis_url, 5.0))
    try:
        room = Room("moves", paths=["/x"], rate=2, per=0.5, session=600.0, client_limit=0)
        for i in range(10):
            await first.enter(room, f"a{i}")
        await second.enter(room, "b0")  # both processes have seen somebody wait
        assert await active(first, room) == 2
        started = time.monotonic()
        await asyncio.sleep(1.25)
        # The refills at 0.5 s and 1 s, with no visitor asking: 2 each.
        assert await active(first, room) == 6
        assert time.monotonic() - started < 1.5
        holders = [store for store in (first, second) if store.ticker.held]
        assert len(holders) == 1  # one process moves the room; the other only asks for the lease
        # The holder stops: the other takes over within the lease.
        other = second if holders[0] is first else first
        await holders[0].aclose()
        await asyncio.sleep(LEASE_MS / 1000 + 0.8)
        assert await active(other, room) >= 10
        assert other.ticker.held
    finally:
        for store in (first, second):
            await store.aclose()


async def test_a_room_nobody_waits_in_is_not_ticked(redis_url: str) -> None:
    # No copies of admissions here: a room is also ticked while one may be used.
    store = Store(connect(redis_url, 5.0), local_admissions=False)
    try:
        await a_room_nobody_waits_in_is_not_ticked(store)
    finally:
        await store.aclose()


async def a_room_nobody_waits_in_is_not_ticked(store: Store) -> None:
    room = Room("empty", paths=["/x"], rate=1, per=0.2, client_limit=0)
    await store.enter(room, "a")
    await store.enter(room, "b")  # waits
    assert store.ticker.rooms == {"empty"}
    await asyncio.sleep(0.5)  # b is admitted at the refill; the line is empty
    assert await active(store, room) == 2
    assert store.ticker.rooms == frozenset()
    ticks = store.ticker.ticks
    await asyncio.sleep(0.5)
    assert store.ticker.ticks == ticks


async def test_open_admits_at_once(store: Store) -> None:
    room = Room("reopens", paths=["/x"], rate=3, per=60.0, status="paused", client_limit=0)
    for i in range(10):
        assert (await store.enter(room, f"v{i}")).state == "waiting"
    await asyncio.sleep(0.1)
    assert await active(store, room) == 0
    await store.configure(room, status="open")
    # In the command's own call: a full bucket, and no more.
    assert await active(store, room) == 3


@pytest.mark.parametrize(
    ("template", "lifespan"),
    [(False, True), (True, True), (False, False)],
    ids=["plain", "of-a-template", "without-a-lifespan"],
)
async def test_the_line_moves_after_every_process_restarted(
    redis_url: str, template: bool, lifespan: bool
) -> None:
    """Every process restarts (a deploy, a crash) while people wait, and
    nobody asks: the new processes tick the room from their start (a
    server that runs no lifespan, as Django's handler: from its first
    request, to any page). Before, a process ticked only the rooms it had
    seen somebody wait in, and the line stood still until a waiting
    visitor asked, losing each interval's admissions (an auditor's
    finding)."""
    from queuegate import QueueGate

    from .conftest import SECRET, client_for, lifespan_app, running

    settings = {"rate": 2, "per": 0.5, "session": 600.0, "client_limit": 0}
    room = Room("ticket-42" if template else "sale", paths=["/x"], **settings)  # type: ignore[arg-type]
    before = Store(connect(redis_url, 5.0))
    try:
        for i in range(30):
            await before.enter(room, f"v{i}")
    finally:
        await before.aclose()  # every process gone: nobody ticks the room
    # Its lease lapses (a new process takes over within it, as from one
    # that stopped), and the room stands still meanwhile.
    await asyncio.sleep(LEASE_MS / 1000 + 0.2)
    admitted = await active_alone(redis_url, room)
    assert admitted == 2
    declared = Room("ticket-{event}", paths=["/t/{event}"], **settings) if template else room  # type: ignore[arg-type]
    gate = QueueGate(lifespan_app, rooms=[declared], secret_key=SECRET, redis=redis_url, environ={})
    if lifespan:
        async with running(gate):
            await asyncio.sleep(1.6)  # its start, and three refills at least, with nobody asking
            # Its start lets in a bucket (2); each refill 2 more.
            assert await active(gate.store, room) >= admitted + 2 + 6
        return
    try:
        async with client_for(gate) as client:
            assert (await client.get("/about")).status_code == 200  # a page no room gates
        await asyncio.sleep(1.6)
        assert await active(gate.store, room) >= admitted + 2 + 6
    finally:
        await gate.aclose()


async def active_alone(redis_url: str, room: Room) -> int:
    """``active``, read by a store of its own (closed after)."""
    store = Store(connect(redis_url, 5.0))
    try:
        return await active(store, room)
    finally:
        await store.aclose()
