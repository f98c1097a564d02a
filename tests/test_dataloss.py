"""A loss of Redis's data is said while nobody waits (queuegate.dataloss):
a real server of the test's own, killed and started again empty, or kept
on disk, with no room ticked and nobody in any line."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from starlette.types import Message, Receive, Scope, Send

from queuegate import QueueGate, Room, Store
from queuegate.connections import connect
from queuegate.dataloss import RETRY
from queuegate.embedded import EmbeddedServer, server_binary

from .conftest import SECRET, client_for, lifespan_app, ok_app, running

pytestmark = pytest.mark.anyio

EVERY = 0.1  # seconds between looks here (5 in a gate)
# Between looks in the restart's test: long beside RETRY, so that a look
# that failed on the broken connection and waited for the next is seen.
SLOW_EVERY = 2.0
SAID = "Redis lost its data"


async def until(condition: Callable[[], bool], seconds: float) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < seconds, "not within the time allowed"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if SAID in r.getMessage()]


@pytest.fixture
async def watched(own_server: EmbeddedServer) -> AsyncIterator[list[Store]]:
    """Two processes' stores on the server, each looking every EVERY s."""
    stores = [Store(connect(own_server.url, 0.5), prefix="qgl") for _ in range(2)]
    for store in stores:
        store.data_watch.start(EVERY)
    await until(lambda: all(store.data_watch.known is not None for store in stores), 5.0)
    yield stores
    for store in stores:
        await store.aclose()


@pytest.mark.parametrize("quiet", [0.0, 0.7, 1.4, 3.1])
async def test_a_redis_restarted_empty_is_said_by_each_process_while_nobody_waits(
    own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture, quiet: float
) -> None:
    """After a quiet spell of any length (landing anywhere in the looks'
    cycle), the restart is said within a look of the server's return, and
    a retry: the first look after it fails on the connection the restart
    broke, and waiting a whole look more made it twice as late."""
    caplog.set_level(logging.INFO, logger="queuegate")
    stores = [Store(connect(own_server.url, 0.5), prefix="qgl") for _ in range(2)]
    probe = aioredis.Redis.from_url(own_server.url)
    try:
        for store in stores:
            store.data_watch.start(SLOW_EVERY)
        await until(lambda: all(store.data_watch.known is not None for store in stores), 5.0)
        one, other = stores
        room = Room("sale", paths=["/sale"], rate=1, per=1)
        await one.stats(room)  # known in Redis, as a gate makes it at its start
        await one.configure("sale", status="paused")  # a setting set at run time, and nobody waits
        await asyncio.sleep(quiet)
        assert not warnings(caplog)
        own_server.kill()
        own_server.start()  # empty: this server keeps nothing on disk
        took = await until(lambda: len(warnings(caplog)) >= 2, 3 * SLOW_EVERY)
        assert took < SLOW_EVERY + RETRY + 0.3, f"said {took:.2f} s after the server was back"
        assert "'qgl'" in warnings(caplog)[0]
        assert "back to the code's" in warnings(caplog)[0]
        assert one.data_watch.losses == other.data_watch.losses == 1
        await asyncio.sleep(SLOW_EVERY + 0.2)  # a look more at the key made again: nothing more said
        assert len(warnings(caplog)) == 2
        assert await probe.get("qgl:since") is not None
    finally:
        await probe.aclose()
        for store in stores:
            await store.aclose()


@pytest.mark.parametrize("how", ["flushall", "deleted"])
async def test_data_gone_from_a_running_redis_is_said(
    own_server: EmbeddedServer, watched: list[Store], caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.WARNING, logger="queuegate")
    probe = aioredis.Redis.from_url(own_server.url)
    try:
        if how == "flushall":
            await probe.flushall()
        else:
            await probe.delete("qgl:since")
        await until(lambda: len(warnings(caplog)) >= 2, 5.0)
    finally:
        await probe.aclose()


async def test_a_restart_that_keeps_the_data_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """Kept on disk (or by a replica that takes over): the key is still
    there, and no loss is said."""
    caplog.set_level(logging.INFO, logger="queuegate")
    kept = ["--appendonly", "yes", "--appendfsync", "always"]
    with EmbeddedServer(server_binary("path"), args=kept) as server:
        store = Store(connect(server.url, 0.5), prefix="qgl")
        try:
            store.data_watch.start(EVERY)
            await until(lambda: store.data_watch.known is not None, 5.0)
            known = store.data_watch.known
            server.kill()
            server.start()
            looks = store.data_watch.looks
            await until(lambda: store.data_watch.looks >= looks + 3, 5.0)  # answered since
            assert store.data_watch.known == known
            assert store.data_watch.losses == 0
            assert not warnings(caplog)
        finally:
            await store.aclose()


async def test_a_gate_looks_from_its_start_and_says_a_first_start_once(
    own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queuegate")
    gates = [
        QueueGate(
            lifespan_app,
            rooms=[Room("sale", paths=["/sale"], rate=1, per=1)],
            secret_key=SECRET,
            redis=own_server.url,
            environ={},
        )
        for _ in range(2)
    ]
    try:
        async with running(gates[0]), running(gates[1]):
            await until(lambda: all(gate.store.data_watch.known is not None for gate in gates), 5.0)
            assert gates[0].store.data_watch.known == gates[1].store.data_watch.known
            firsts = [r for r in caplog.records if "held no data" in r.getMessage()]
            assert len(firsts) == 1  # the second process found the key the first made
            assert not warnings(caplog)
    finally:
        for gate in gates:
            await gate.store.aclose()


async def lifespan_refused(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that refuses the lifespan before reading a message, as
    Django's ASGI handler does (servers then run none)."""
    if scope["type"] == "lifespan":
        raise ValueError("Django can only handle ASGI/HTTP connections, not lifespan.")
    await ok_app(scope, receive, send)


async def test_a_gate_whose_app_runs_no_lifespan_looks_from_its_first_request(
    own_server: EmbeddedServer,
) -> None:
    gate = QueueGate(
        lifespan_refused,
        rooms=[Room("sale", paths=["/sale"], rate=1, per=1)],
        secret_key=SECRET,
        redis=own_server.url,
        environ={},
    )
    try:
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        outbox: asyncio.Queue[Message] = asyncio.Queue()
        with pytest.raises(ValueError, match="lifespan"):
            await gate({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put)
        assert gate.store.data_watch.known is None
        async with client_for(gate) as visitor:
            assert (await visitor.get("/elsewhere")).status_code == 200
        await until(lambda: gate.store.data_watch.known is not None, 5.0)
    finally:
        await gate.store.aclose()


async def test_a_gate_given_a_client_stops_its_looks_at_shutdown(own_server: EmbeddedServer) -> None:
    """The client is the app's: left open, and no look goes on with it."""
    client = aioredis.Redis.from_url(own_server.url)
    gate = QueueGate(
        lifespan_app,
        rooms=[Room("sale", paths=["/sale"], rate=1, per=1)],
        secret_key=SECRET,
        redis=client,
        environ={},
    )
    try:
        async with running(gate):
            await until(lambda: gate.store.data_watch.looks > 0, 5.0)
            assert gate.store.data_watch.watching
        assert not gate.store.data_watch.watching
        assert await client.ping()
    finally:
        await gate.store.aclose()


async def test_a_look_redis_refuses_is_said_once(
    own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An ACL that allows the rooms' keys only: no loss can be told, and
    the log says so, once, where it said nothing at all."""
    caplog.set_level(logging.WARNING, logger="queuegate")
    admin = aioredis.Redis.from_url(own_server.url)
    await admin.acl_setuser("rooms", enabled=True, passwords=["+pw"], keys=["qgl:{*}*"], commands=["+@all"])
    url = own_server.url.replace("redis://", "redis://rooms:pw@")
    store = Store(connect(url, 0.5), prefix="qgl")
    try:
        store.data_watch.start(EVERY)
        await until(lambda: any("refused the look" in r.getMessage() for r in caplog.records), 5.0)
        await asyncio.sleep(5 * EVERY)
        said = [r.getMessage() for r in caplog.records if "refused the look" in r.getMessage()]
        assert len(said) == 1
        assert "'qgl:since'" in said[0]
        assert store.data_watch.looks == 0
    finally:
        await store.aclose()
        await admin.aclose()
