"""The pushed room: open streams follow the line from what each script
publishes, without a call per stream. A real uvicorn, real streams, and
Redis as the judge of every place shown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub

from queuegate import QueueGate, Room, Store, feeds, ticker
from queuegate.embedded import EmbeddedServer
from queuegate.feeds import RESYNC_GAP, Feed
from queuegate.invalidations import DEAD_AFTER
from queuegate.store import connect

from .conftest import SECRET, lifespan_app, served
from .test_deadlines import hang, resume


def gate_for(redis_url: str, room: Room) -> QueueGate:
    return QueueGate(
        lifespan_app, rooms=[room], secret_key=SECRET, redis=redis_url, cookie_secure=False, environ={}
    )


class Watched:
    """A visitor's stream, read in the background: its latest event."""

    def __init__(self, client: httpx.AsyncClient, base: str, room: str) -> None:
        self.client, self.base, self.room = client, base, room
        self.events: list[tuple[str, dict[str, object]]] = []
        self.heard = asyncio.Event()
        self.ended = asyncio.Event()
        self.visitor = client.cookies[f"qg_{room}"].split(".")[0].split("~")[0]
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async with self.client.stream("GET", f"{self.base}/_queuegate/stream/{self.room}") as response:
                name = ""
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        name = line.partition(":")[2].strip()
                    elif line.startswith("data:"):
                        self.events.append((name, json.loads(line.partition(":")[2])))
                        self.heard.set()
        except httpx.TransportError:
            pass  # the server stopped at the test's end
        finally:
            self.ended.set()

    async def first(self) -> None:
        await self.heard.wait()

    async def placed(self) -> None:
        """Until the stream has shown a place ('unavailable' is none)."""
        while not any(name == "waiting" for name, _ in self.events):
            self.heard.clear()
            await self.heard.wait()

    async def hears(self, name: str) -> float:
        """Until the stream sends an event ``name``: when it came (time.monotonic())."""
        while not self.events or self.events[-1][0] != name:
            self.heard.clear()
            await self.heard.wait()
        return time.monotonic()

    async def shows(self, position: int) -> None:
        """Until the stream's last event shows ``position``."""
        while not (self.events and self.events[-1][1].get("position") == position):
            self.heard.clear()
            await self.heard.wait()


class Said:
    """The room's pushes, heard as the app processes hear them: the first
    that named each visitor admitted ('active') or gone ('none')."""

    def __init__(self, redis_url: str, room: str) -> None:
        self.client = aioredis.Redis.from_url(redis_url)
        self.pubsub = self.client.pubsub()
        self.channel = f"qg:{{{room}}}:moved"
        self.named: dict[str, str] = {}
        self.heard = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.pubsub.subscribe(self.channel)
        self.task = asyncio.create_task(self._hear())

    async def _hear(self) -> None:
        async for message in self.pubsub.listen():
            if message["type"] != "message":
                continue
            push = json.loads(message["data"])
            for state, key in (("active", "a"), ("none", "g")):
                for visitor in push.get(key) or ():
                    self.named.setdefault(visitor, state)
            self.heard.set()

    async def first_of(self, visitor: str) -> str:
        while visitor not in self.named:
            self.heard.clear()
            await self.heard.wait()
        return self.named[visitor]

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
        await self.pubsub.aclose()  # type: ignore[no-untyped-call]
        await self.client.aclose()


@asynccontextmanager
async def visitors(base: str, path: str, count: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` visitors, each joined in turn: holding its cookie. A join
    whose Redis call outlived the gate's timeout on a loaded machine fails
    closed (a 503 page and no cookie); the visitor reloads, as a person would."""
    clients = [httpx.AsyncClient(timeout=30) for _ in range(count)]
    try:
        for client in clients:
            for _ in range(5):
                response = await client.get(base + path)
                if any(name.startswith("qg_") for name in client.cookies):
                    break
                assert response.status_code == 503, response.status_code
                await asyncio.sleep(0.2)
            else:
                pytest.fail(f"no place in 5 tries: {response.status_code} {response.text[:200]}")
        yield clients
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Until ``condition`` holds: what the server's thread sets, which no
    asyncio event of this loop would tell."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.01)


async def ranks(redis_url: str, room: str) -> dict[str, int]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        line: list[Any] = await client.zrange(f"qg:{{{room}}}:waiting", 0, -1)
        return {member.decode(): rank for rank, member in enumerate(line)}
    finally:
        await client.aclose()


def test_streams_show_the_place_redis_gives_as_the_line_moves(redis_url: str) -> None:
    """Visitors leave from all over the line and the ticker admits two each
    half second; every stream's last position is the visitor's rank in
    Redis, admitted ones hear their turn and leavers' streams end."""
    room = Room("moving", paths=["/q"], rate=2, per=0.5, client_limit=0, abandon=0)

    async def scenario(base: str) -> None:
        # Whether a leaver was admitted before its leave came is Redis's
        # order of the two, heard on the room's pushes: on a loaded machine
        # the ticker reached a leaver near the front first.
        said = Said(redis_url, "moving")
        await said.start()
        try:
            async with visitors(base, "/q", 30) as clients:
                watched = [Watched(c, base, "moving") for c in clients[2:]]  # the first 2 went in
                await asyncio.gather(*(w.first() for w in watched))
                draw = random.Random(7)
                leavers = draw.sample(watched[4:], 6)
                for w in leavers:
                    await w.client.post(f"{base}/_queuegate/leave/moving")
                    await asyncio.sleep(draw.random() * 0.3)
                for w in leavers:
                    await asyncio.wait_for(w.ended.wait(), 20.0)
                    assert w.events[-1][0] == "state"
                    assert w.events[-1][1]["state"] == await asyncio.wait_for(said.first_of(w.visitor), 20.0)
                assert "none" in [w.events[-1][1]["state"] for w in leavers]  # some left while waiting
                await asyncio.sleep(0.8)
                operator = Store(connect(redis_url, 5.0))
                await operator.configure(room, status="paused")  # the line stands still
                await operator.aclose()
                truth = await ranks(redis_url, "moving")
                admitted = [w for w in watched if w not in leavers and w.visitor not in truth]
                assert admitted  # the ticker let some in meanwhile
                for w in admitted:
                    await asyncio.wait_for(w.ended.wait(), 20.0)
                    assert w.events[-1][0] == "state"
                    assert w.events[-1][1]["state"] == "active"
                waiting = [w for w in watched if w.visitor in truth]
                assert waiting
                # What the last pushes said reaches a stream at the room's next
                # flush, or (far back) within a second or half its poll interval.
                for w in waiting:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(w.shows(truth[w.visitor] + 1), 10.0)
                    name, data = w.events[-1]
                    assert name == "waiting"
                    assert data["position"] == truth[w.visitor] + 1, (w.events[-3:], truth[w.visitor])
                for w in watched:
                    w.task.cancel()
        finally:
            await said.aclose()

    with served(gate_for(redis_url, room)) as base:
        asyncio.run(scenario(base))


def test_a_push_heard_after_a_streams_read_is_not_counted_twice(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leave published just before a stream reads its place, and heard on
    the subscription only after the read's reply (two connections, no set
    order between them): the rank read counts the leave already, and the
    stream must not count it again. The subscription is held still here
    while the read is made."""
    flowing = threading.Event()
    flowing.set()
    get_message = PubSub.get_message

    async def held(self: PubSub, *args: Any, **kwargs: Any) -> Any:
        await until(flowing.is_set)
        return await get_message(self, *args, **kwargs)

    monkeypatch.setattr(PubSub, "get_message", held)
    room = Room("late", paths=["/q"], rate=1, per=3600.0, status="paused", client_limit=0)
    gate = gate_for(redis_url, room)
    fed = gate.endpoints.feeds

    async def scenario(base: str) -> None:
        store = Store(connect(redis_url, 5.0))
        try:
            await store.enter_many(room, ["head0", "head1"])
            async with visitors(base, "/q", 2) as clients:
                first = Watched(clients[0], base, "late")
                await first.placed()
                await until(gate.store.invalidations.subscribed.is_set)
                flowing.clear()
                await asyncio.sleep(0.2)  # the listener's read under way ends: the next one waits
                reads = fed.reads
                await store.leave(room, "head0")
                second = Watched(clients[1], base, "late")
                await until(lambda: fed.reads > reads)
                flowing.set()  # the leave is heard now, after the read's reply
                await asyncio.sleep(1.0)  # a flush (0.25 s) and a read again, if any
                truth = await ranks(redis_url, "late")
                assert truth[second.visitor] == 2
                for w in (first, second):
                    assert w.events[-1][1]["position"] == truth[w.visitor] + 1, w.events
                    w.task.cancel()
        finally:
            flowing.set()
            await store.aclose()

    with served(gate) as base:
        asyncio.run(scenario(base))


def test_a_leaver_far_back_and_a_removed_visitor_lose_their_streams_at_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The push of the leave ends the stream itself: not a flush, a resync
    or a read of the stream's own answer, which come later (far back, a
    change is shown at most every second or half poll interval)."""
    # The room's flushes and resyncs an hour apart, and no read counted: only
    # the push can end the streams. A wall-clock bound (1 s) measured a
    # loaded machine's stalls as well, and failed once in CI.
    monkeypatch.setattr(feeds, "FLUSH", 3600.0)
    room = Room("long", paths=["/q"], rate=1, per=3600.0, client_limit=0)
    gate = gate_for(redis_url, room)

    async def scenario(base: str) -> None:
        store = Store(connect(redis_url, 5.0))
        try:
            await store.enter_many(room, [f"filler{i}" for i in range(1500)])
            async with visitors(base, "/q", 2) as clients:
                leaver, removed = Watched(clients[0], base, "long"), Watched(clients[1], base, "long")
                await asyncio.gather(leaver.first(), removed.first())
                assert leaver.events[0][1]["position"] == 1500  # far back
                counted = gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs
                await leaver.client.post(f"{base}/_queuegate/leave/long")
                await asyncio.wait_for(leaver.ended.wait(), 20.0)  # without the push, never
                assert leaver.events[-1][1]["state"] == "none"
                await store.leave(room, removed.visitor)  # the operator, from another process
                await asyncio.wait_for(removed.ended.wait(), 20.0)
                assert removed.events[-1][1]["state"] == "none"
                assert (gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs) == counted
        finally:
            await store.aclose()

    with served(gate) as base:
        asyncio.run(scenario(base))


def test_redis_work_per_push_does_not_grow_with_open_streams(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 streams, then 200, in a paused room (every stream is near the
    front: the wait is unknown) while 10 visitors at the head leave, each
    leave a push: Redis's commands are about the same, and no stream reads
    its place again. A read per stream per push would be 2,000 more with
    200 streams."""
    # What runs by the clock is left out of the count: the paused room's
    # ticks (an hour apart here; it has nothing to admit) and the
    # subscriptions' pings. A loaded machine stretched the window, and the
    # ticks in it, by 25 commands.
    monkeypatch.setattr(ticker, "RENEW", 3600.0)
    monkeypatch.setattr(ticker, "LEASE_MS", 3_600_000)
    room = Room("many", paths=["/q"], rate=1, per=3600.0, status="paused", client_limit=0)
    gate = gate_for(redis_url, room)
    fed = gate.endpoints.feeds

    async def calls_with(base: str, count: int, store: Store) -> int:
        heads = [f"head{count}-{i}" for i in range(10)]
        await store.enter_many(room, heads)
        async with visitors(base, "/q", count) as clients:
            watched = [Watched(c, base, "many") for c in clients]
            # Every stream has its place: a first read that Redis did not
            # answer in time (a loaded machine) is made again 5 s later, and
            # was counted as the pushes' work.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(w.placed() for w in watched)), 20.0)
            unplaced = [w.events for w in watched if not any(name == "waiting" for name, _ in w.events)]
            assert not unplaced, unplaced
            counted = fed.reads, fed.resyncs
            client = aioredis.Redis.from_url(redis_url)
            try:
                before = await unpaced_commands(client)
                for head in heads:
                    await store.leave(room, head)
                    await asyncio.sleep(0.05)
                # Further back than 20, a stream shows a change at most every
                # half poll interval (5 s while the wait is unknown), at the
                # room's next flush (every 0.25 s): 2.75 s.
                await asyncio.sleep(3.75)
                after = await unpaced_commands(client)
            finally:
                await client.aclose()
            with contextlib.suppress(TimeoutError):  # later on a loaded machine
                await asyncio.wait_for(asyncio.gather(*(w.shows(i + 1) for i, w in enumerate(watched))), 20.0)
            shown = [w.events[-1][1]["position"] for w in watched]
            assert (fed.reads, fed.resyncs) == counted
            for w in watched:
                w.task.cancel()
        for visitor in [w.visitor for w in watched]:
            await store.leave(room, visitor)
        assert shown == list(range(1, count + 1))  # every stream shows every leave
        return int(after - before)

    async def scenario(base: str) -> tuple[int, int]:
        store = Store(connect(redis_url, 5.0))
        try:
            return await calls_with(base, 20, store), await calls_with(base, 200, store)
        finally:
            await store.aclose()

    with served(gate) as base:
        few, many = asyncio.run(scenario(base))
    assert many <= few + 20, (few, many)


async def unpaced_commands(client: aioredis.Redis) -> int:
    """The commands Redis has run, but its pings (one each 0.25 s a subscription)."""
    stats = await client.info("commandstats")
    pings = int(stats.get("cmdstat_ping", {}).get("calls", 0))
    return int((await client.info("stats"))["total_commands_processed"]) - pings


def test_streams_resync_together_after_the_subscription_is_lost(redis_url: str) -> None:
    """Pushes during a lost subscription go unheard: when it is back, the
    room's streams read their ranks in one call (not one each), a visitor
    removed meanwhile hears so, and the others show their place."""
    room = Room("gap", paths=["/q"], rate=1, per=3600.0, status="paused", client_limit=0)
    gate = gate_for(redis_url, room)

    async def scenario(base: str) -> None:
        store = Store(connect(redis_url, 5.0))
        client = aioredis.Redis.from_url(redis_url)
        try:
            await store.enter_many(room, ["head0", "head1"])
            async with visitors(base, "/q", 5) as clients:
                watched = [Watched(c, base, "gap") for c in clients]
                await asyncio.gather(*(w.first() for w in watched))
                reads = gate.endpoints.feeds.reads
                await client.client_kill_filter(_type="pubsub")
                await store.leave(room, "head0")  # unheard
                await store.leave(room, watched[0].visitor)  # unheard
                await asyncio.wait_for(watched[0].ended.wait(), 5.0)
                assert watched[0].events[-1][1]["state"] == "none"
                await asyncio.sleep(0.5)
                truth = await ranks(redis_url, "gap")
                for w in watched[1:]:
                    assert w.events[-1][1]["position"] == truth[w.visitor] + 1
                assert gate.endpoints.feeds.reads - reads <= 1  # the removed visitor's own answer
                assert gate.endpoints.feeds.resyncs >= 1
                for w in watched:
                    w.task.cancel()
        finally:
            await store.aclose()
            await client.aclose()

    with served(gate) as base:
        asyncio.run(scenario(base))


def test_every_stream_is_told_when_redis_stops_answering_and_shown_its_place_again(
    own_server: EmbeddedServer,
) -> None:
    """A hung Redis (SIGSTOP): every open stream hears `unavailable` once
    the subscription is given up (DEAD_AFTER without an answer to its
    pings), once only though the outage outlasts its polls (a paused room's
    5 s: each poll fails), stays open, and once Redis answers shows its
    place again, unchanged as it is. (An auditor held 1,180 streams through
    an outage: 56 heard it, those whose poll came due; the rest heard only
    pings, the room's feed never having asked Redis. A review: a stream
    told 'unavailable' at every failed poll, and never shown its place
    again, since the place had not changed.)"""
    room = Room("hush", paths=["/q"], rate=1, per=3600.0, status="paused", client_limit=0)
    gate = gate_for(own_server.url, room)

    async def scenario(base: str) -> None:
        async with visitors(base, "/q", 4) as clients:
            watched = [Watched(c, base, "hush") for c in clients]
            await asyncio.gather(*(w.placed() for w in watched))
            before = [w.events[-1][1]["position"] for w in watched]
            hang(own_server)
            try:
                began = time.monotonic()
                told = await asyncio.wait_for(asyncio.gather(*(w.hears("unavailable") for w in watched)), 15)
                # (The resync's call fails at the gate's timeout, 0.25 s; a
                # margin for a loaded machine. Before, a stream heard it only
                # at a poll after a ping, 15 s after the feed began at the
                # soonest, 19 s or more into the hang here.)
                assert max(told) - began <= DEAD_AFTER + 4, [round(t - began, 2) for t in told]
                await asyncio.sleep(12)  # past two polls of a paused room, each failing
                assert not any(w.ended.is_set() for w in watched)
            finally:
                resume(own_server)
            await asyncio.wait_for(asyncio.gather(*(w.hears("waiting") for w in watched)), 15)
            for w, position in zip(watched, before, strict=True):
                names = [name for name, _ in w.events]
                assert names.count("unavailable") == 1, names
                assert w.events[-1][1]["position"] == position
            for w in watched:
                w.task.cancel()

    with served(gate) as base:
        asyncio.run(scenario(base))


@pytest.mark.anyio
async def test_streams_opened_in_a_moving_room_ask_for_a_resync_a_second_at_most() -> None:
    """A stream whose reads kept finding pushes it could not place asks for
    a resync of the room's streams. Opened steadily in a room pushing
    several times a second, they ran resyncs of every stream back to back
    (a review): one comes a second after the last at the soonest."""
    feed = Feed(room=None)
    feed.resync_soon()  # none before: at once
    assert feed.resync_due.is_set()
    feed.resync_due.clear()
    feed.resynced_at = time.monotonic()
    for _ in range(5):
        feed.resync_soon()
    assert not feed.resync_due.is_set()
    await asyncio.wait_for(feed.resync_due.wait(), timeout=RESYNC_GAP + 0.5)
    assert time.monotonic() - feed.resynced_at >= RESYNC_GAP * 0.99
