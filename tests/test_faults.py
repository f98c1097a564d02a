"""Faults with real processes on loopback: a slow or silent Redis behind a
proxy, a server killed during traffic, a crash with AOF persistence, and
several app processes sharing one Redis. Every test bounds its own time and
stops what it starts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from queuegate import Room, Store, StoreError
from queuegate.embedded import EmbeddedServer, free_port, server_binary
from queuegate.store import connect

from .conftest import MakeGate, client_for, wait_for_http
from .servers.proxies import DelayingProxy
from .stalls import Stalls

pytestmark = pytest.mark.anyio

TIMEOUT = 0.2
MARGIN = 0.3


@pytest.fixture
async def proxy(server_url: str) -> AsyncIterator[DelayingProxy]:
    port = int(server_url.rsplit(":", 1)[1].split("/")[0])
    proxy = DelayingProxy(port)
    await proxy.start()
    yield proxy
    await proxy.close()


ROOM = Room("proxied", paths=["/x"], capacity=1000, client_limit=0)


@pytest.fixture
async def proxied_store(proxy: DelayingProxy, redis_url: str) -> AsyncIterator[Store]:
    """A store that reaches Redis through the proxy, its scripts loaded."""
    store = Store(aioredis.Redis.from_url(f"redis://127.0.0.1:{proxy.port}/0"), timeout=TIMEOUT)
    await store.enter(ROOM, "warm-up")
    yield store
    await store.aclose()


async def test_slow_redis_never_leaves_a_reply_for_the_wrong_request(
    proxy: DelayingProxy, proxied_store: Store
) -> None:
    proxy.delay = 0.5  # every reply comes after its request gave up
    with Stalls() as stalls:
        started = time.monotonic()
        slow = await asyncio.gather(
            *(proxied_store.enter(ROOM, f"slow{i}") for i in range(20)), return_exceptions=True
        )
        ended = time.monotonic()
    assert all(isinstance(r, StoreError) for r in slow)
    assert not stalls.late([("all 20", started, ended)], TIMEOUT + MARGIN)
    proxy.delay = 0.0
    await asyncio.sleep(0.6)  # the late replies arrive now and must be dropped
    asked = [f"fast{i}" for i in range(50)]
    outcomes = await asyncio.gather(*(proxied_store.enter(ROOM, v) for v in asked))
    assert [o.visitor for o in outcomes] == asked  # each got its own reply
    assert all(o.state == "active" for o in outcomes)


async def test_silent_redis_is_given_up_and_replaced(proxy: DelayingProxy, proxied_store: Store) -> None:
    proxy.flowing.clear()
    for _ in range(3):
        with pytest.raises(StoreError):
            await proxied_store.enter(ROOM, "lost")
    await asyncio.sleep(1.2)  # silent past 4 x timeout (1 s at least): the connection is dropped
    with pytest.raises(StoreError):
        await proxied_store.enter(ROOM, "lost")
    proxy.flowing.set()
    outcome = await proxied_store.enter(ROOM, "back")
    assert (outcome.state, outcome.visitor) == ("active", "back")


async def test_killed_during_traffic_closed_mode_forwards_only_admitted(
    make_gate: MakeGate, own_server: EmbeddedServer
) -> None:
    forwarded: list[str] = []

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        forwarded.append(scope["queuegate"].visitor)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"in"})

    gate = await make_gate(
        app,
        rooms=[Room("sale", paths=["/s"], capacity=5, client_limit=0)],
        redis=own_server.url,
        timeout=TIMEOUT,
    )
    clients = [client_for(gate) for _ in range(12)]
    results: list[tuple[int, float, float, str]] = []  # status, asked, answered, Retry-After

    async def traffic(until: float) -> None:
        while time.monotonic() < until:
            for client in clients:
                start = time.monotonic()
                response = await client.get("/s")
                answered, retry = time.monotonic(), response.headers.get("retry-after", "")
                results.append((response.status_code, start, answered, retry))
            await asyncio.sleep(0.01)

    try:
        with Stalls() as stalls:
            before = asyncio.create_task(traffic(time.monotonic() + 1.0))
            await asyncio.sleep(0.3)
            admitted_before = set(forwarded)
            own_server.kill()
            await before
        assert len(admitted_before) == 5
        killed_results = [r for r in results[-24:]]
        # The 5 admitted before the kill keep passing; the 7 others get the
        # closed answer.
        assert sorted(status for status, _, _, _ in killed_results) == [200] * 10 + [503] * 14
        assert all(retry == "5" for status, _, _, retry in killed_results if status == 503)
        calls = ((i, began, ended) for i, (_, began, ended, _) in enumerate(results))
        late = stalls.late(calls, TIMEOUT + MARGIN)
        assert not late, late
        assert set(forwarded) == admitted_before  # nobody new got through while Redis was gone
        own_server.start()
        for _ in range(100):  # 5 s at most
            if (await clients[0].get("/s")).status_code == 200:
                break
            await asyncio.sleep(0.05)
        # Recovered by itself: the line is empty again, five get in.
        statuses = [(await c.get("/s")).status_code for c in clients]
        assert statuses.count(200) == 5
        with redis.Redis(port=own_server.port) as check:
            connections = len(check.client_list())
        assert connections <= 3  # the gate's one pipelined connection (and this check's)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def test_aof_crash_keeps_a_prefix_of_the_line_in_arrival_order(tmp_path: Path) -> None:
    data = tmp_path / "aof"
    data.mkdir()
    args = ["--appendonly", "yes", "--appendfsync", "everysec"]
    server = EmbeddedServer(server_binary("path"), args=args, data_dir=str(data)).start()
    room = Room("aof", paths=["/x"], rate=50, per=3600, client_limit=0)
    joined = [f"v{i:05d}" for i in range(20_000)]

    async def join_until_killed() -> None:
        store = Store(aioredis.Redis.from_url(server.url), timeout=2.0)
        try:
            for start in range(0, len(joined), 200):
                await store.enter_many(room, joined[start : start + 200])
                if start == 4000:
                    server.kill()  # SIGKILL mid-traffic: no shutdown save
        except StoreError:
            pass
        finally:
            await store.aclose()

    try:
        asyncio.run(join_until_killed())
        server.start()
        with redis.Redis(port=server.port) as check:
            waiting = [m.decode() for m in check.zrange("qg:{aof}:waiting", 0, -1)]
            active = sorted(m.decode() for m in check.zrange("qg:{aof}:active", 0, -1))
        survivors = sorted(active + waiting)
        assert len(survivors) >= 4000  # about a second of joins may be lost, not more
        assert survivors == joined[: len(survivors)]  # a prefix: nothing lost in the middle
        assert active == joined[:50]  # the admitted are the head of it
        assert waiting == joined[50 : len(survivors)]  # and the line is in arrival order
    finally:
        server.close()


APP = """
import os
from queuegate import QueueGate, Room
async def inside(scope, receive, send):
    if scope["type"] != "http":
        return
    ticket = scope.get("queuegate")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": ticket.visitor.encode() if ticket else b"ok"})
app = QueueGate(inside, rooms=[Room("multi", paths=["/m"], rate=5, per=0.5, capacity=8, client_limit=0)],
                secret_key="multi-process-secret-key", redis=os.environ["QUEUEGATE_REDIS_URL"],
                cookie_secure=False)
"""


def test_four_app_processes_share_one_line(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "multi_app.py").write_text(APP)
    ports = [free_port() for _ in range(4)]
    env = {**os.environ, "QUEUEGATE_REDIS_URL": redis_url, "PYTHONPATH": str(tmp_path)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "multi_app:app", "--port", str(port), "--log-level", "warning"],
            env=env,
            cwd=tmp_path,
        )
        for port in ports
    ]
    try:
        for port in ports:
            wait_for_http(f"http://127.0.0.1:{port}/health")
        asyncio.run(_crowd(ports, redis_url))
    finally:
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            process.wait(10)


async def _crowd(ports: list[int], redis_url: str) -> None:
    """40 visitors poll the four processes in turn for 4 s, while a sampler
    watches the room in Redis."""
    clients = [httpx.AsyncClient() for _ in range(40)]
    first_in: dict[int, str] = {}
    samples: list[tuple[float, int, int]] = []
    monitor = aioredis.Redis.from_url(redis_url)
    start = time.monotonic()
    stop = start + 4.0

    async def visitor(n: int, client: httpx.AsyncClient) -> None:
        i = n
        while time.monotonic() < stop:
            port = ports[i % len(ports)]
            i += 1
            response = await client.get(f"http://127.0.0.1:{port}/m", headers={"accept": "application/json"})
            if response.status_code == 200 and n not in first_in:
                first_in[n] = response.text
            await asyncio.sleep(0.05)

    async def sampler() -> None:
        while time.monotonic() < stop:
            active = await monitor.zcard("qg:{multi}:active")
            admitted = int(await monitor.hget("qg:{multi}:state", "admitted") or 0)
            samples.append((time.monotonic() - start, active, admitted))
            await asyncio.sleep(0.02)

    try:
        await asyncio.gather(sampler(), *(visitor(n, c) for n, c in enumerate(clients)))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
        await monitor.aclose()
    assert samples
    assert max(active for _, active, _ in samples) <= 8  # capacity, at every sample
    for elapsed, _, admitted in samples:
        assert admitted <= 5 * (1 + int(elapsed / 0.5) + 1)  # at most N per interval (one boundary of slack)
    admitted_ids = list(first_in.values())
    assert len(admitted_ids) == len(set(admitted_ids))  # nobody admitted twice
    assert len(admitted_ids) == 8  # capacity bound: sessions are long, 8 got in


@pytest.mark.parametrize("refusal", ["maxmemory", "min-replicas-to-write"])
async def test_a_redis_refusing_writes_still_answers_the_line(refusal: str) -> None:
    """Redis refusing writes for now (over its maxmemory with noeviction, or
    fewer replicas than min-replicas-to-write) refuses a function (FCALL)
    before it runs, where a script fails only at a write: the calls sent as
    functions go again as scripts, so the visitors inside are still let
    through (they were refused once enter became a function); a newcomer
    takes a place where the server lets the script write. A library the
    server refused to load then (its functions flushed meanwhile) is loaded
    again once it takes writes: functions are not given up for good."""
    room = Room("full", paths=["/x"], rate=5, per=1.0)
    with EmbeddedServer(server_binary("path")) as server:
        store = Store(connect(server.url, 2.0), prefix="qgfull")
        try:
            assert (await store.enter(room, "inside")).state == "active"
            if refusal == "maxmemory":
                await store.client.config_set("maxmemory-policy", "noeviction")
                await store.client.config_set("maxmemory", "1")
            else:
                await store.client.config_set("min-replicas-to-write", "1")
            with pytest.raises(redis.exceptions.ResponseError):
                await store.client.set("plain-write", "refused")  # the server refuses writes
            if refusal == "maxmemory":
                await store.client.function_flush()  # (allowed there: it frees memory)
            assert (await store.enter(room, "inside")).state == "active"
            if refusal == "maxmemory":
                assert (await store.enter(room, "newcomer")).state in ("active", "waiting")
            else:  # a place in the line is a write: refused, the gate's fail mode answers
                with pytest.raises(StoreError, match="NOREPLICAS"):
                    await store.enter(room, "newcomer")
            await store.client.config_set("maxmemory", "0")
            await store.client.config_set("min-replicas-to-write", "0")
            assert (await store.enter(room, "later")).state in ("active", "waiting")  # (a call to Redis)
            assert store.calls.fcall
            assert await store.client.function_list(), "the library was not loaded again"
        finally:
            await store.client.config_set("maxmemory", "0")
            await store.client.config_set("min-replicas-to-write", "0")
            await store.aclose()
