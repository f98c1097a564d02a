"""Deadlines under a hung Redis (SIGSTOP): every call fails within its own
timeout, whenever it is made during the hang, and a call Redis runs after
its caller gave up changes nothing (no ghost places)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis.asyncio as aioredis

from queuegate import Room, Store, StoreError
from queuegate.embedded import EmbeddedServer
from queuegate.pipeline import AutoPipeline, pack
from queuegate.store import connect

from .conftest import MakeGate, call_asgi, http_scope
from .stalls import Stalls

pytestmark = pytest.mark.anyio

TIMEOUT = 0.25
# Stated margin: event loop scheduling on a loaded 2-core machine. Before the
# fix, calls made 0.4-1.0 s into a hang took 0.65-1.33 s.
MARGIN = 0.15
# Moments into the hang at which calls are made: at its start, after the
# first calls timed out, around the connection's silence limit (1 s) and
# after the connection was given up and a new one opened.
MOMENTS = (0.0, 0.1, 0.4, 0.6, 0.95, 1.1, 1.6)


def hang(server: EmbeddedServer) -> None:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)


def resume(server: EmbeddedServer) -> None:
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGCONT)


async def at_moments(call: object) -> list[tuple[float, float]]:
    """Run ``call()`` at each moment into the hang; the (moment, seconds)
    of the calls that took longer than the timeout and its margin beyond
    the stalls of the test process that overlapped them (``tests.stalls``:
    a call at the hang's start took 0.437 s in a loaded CI run). A call that waits
    for the connection's silence limit instead of its own deadline
    (0.65-1.33 s before the fix) does so with the loop idle."""
    start = time.monotonic()

    async def one(moment: float) -> tuple[float, float, float]:
        await asyncio.sleep(moment - (time.monotonic() - start))
        began = time.monotonic()
        await call()  # type: ignore[operator]
        return moment, began, time.monotonic()

    with Stalls() as stalls:
        taken = await asyncio.gather(*(one(m) for m in MOMENTS))
    return stalls.late(taken, TIMEOUT + MARGIN)


async def test_pipeline_calls_fail_within_their_own_timeout_at_every_moment_of_a_hang(
    own_server: EmbeddedServer,
) -> None:
    client = aioredis.Redis.from_url(own_server.url)
    pool = client.connection_pool
    pipe = AutoPipeline(lambda: pool.connection_class(**pool.connection_kwargs), TIMEOUT, 1.0)
    try:
        assert await pipe.send(pack("PING")) == b"PONG"
        hang(own_server)

        async def ping() -> None:
            with pytest.raises(Exception, match=r"no reply|sent nothing"):
                await pipe.send(pack("PING"))

        try:
            late = await at_moments(ping)
        finally:
            resume(own_server)
        assert not late, f"calls answered after timeout + margin: {late}"
        await asyncio.sleep(1.2)  # the silent connection is given up; the next call opens a new one
        assert await pipe.send(pack("PING")) == b"PONG"
    finally:
        await pipe.aclose()
        await client.aclose()


async def test_gate_answers_within_timeout_during_a_hang_and_leaves_no_ghost_places(
    make_gate: MakeGate, own_server: EmbeddedServer
) -> None:
    room = Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)
    gate = await make_gate(
        rooms=[room],
        redis=own_server.url,
        timeout=TIMEOUT,
    )
    status, _, _ = await call_asgi(gate, http_scope("/checkout"))
    assert status == 200  # the one admission of the hour
    hang(own_server)
    statuses: list[int] = []

    async def newcomer() -> None:
        status, headers, _ = await call_asgi(gate, http_scope("/checkout"))
        assert "set-cookie" not in headers  # no place was promised
        statuses.append(status)

    try:
        late = await at_moments(newcomer)
    finally:
        resume(own_server)
    assert statuses == [503] * len(MOMENTS)
    assert not late, f"requests answered after timeout + margin: {late}"
    # Redis now runs whatever it had read of those joins: each is past its
    # deadline, so none takes a place. Read by a store of its own with 5 s
    # to answer: the gate's 0.25 s is what was tested, and a loaded machine
    # just after the resume took longer (NOSCRIPT, then the script's load).
    await asyncio.sleep(1.5)
    judge = Store(connect(own_server.url, 5.0))
    try:
        stats = await judge.stats(room)
        assert (stats["waiting"], stats["active"], stats["joined"]) == (0, 1, 0)
        # The gate recovered: a newcomer joins the line now. A request that
        # still fails closed must promise no place, as during the hang.
        for _ in range(20):
            status, headers, _ = await call_asgi(gate, http_scope("/checkout"))
            assert status == 503
            if "set-cookie" in headers:
                break
            await asyncio.sleep(0.1)
        assert "set-cookie" in headers
        assert (await judge.stats(room))["waiting"] == 1
    finally:
        await judge.aclose()


async def test_a_script_run_after_its_deadline_changes_nothing(redis_url: str) -> None:
    store = Store(aioredis.Redis.from_url(redis_url), timeout=TIMEOUT)
    room = Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)
    try:
        await store.enter(room, "first-visitor-00")
        assert store.clock.offset is not None
        # As if this process's clock were 10 s behind Redis: every deadline
        # it sends has passed when the script runs.
        store.clock.offset -= 10_000
        for call in (
            store.enter(room, "second-visitor-0"),
            store.leave(room, "first-visitor-00"),
            store.drain(room),
            store.configure(room, rate=5),
        ):
            with pytest.raises(StoreError, match="LATE"):
                await call
        store.clock.offset += 10_000
        stats = await store.stats(room)
        assert (stats["waiting"], stats["active"], stats["rate"]) == (0, 1, 1)
    finally:
        await store.aclose()
