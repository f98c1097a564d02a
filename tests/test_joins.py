"""Newcomers sent together (queuegate.joins, join.lua, newcomers.lua): a
batch of joins must get exactly the answers, and leave exactly the room,
that the same joins would get from the full path one by one.

The machine below drives two rooms of the same shape in lockstep: in one,
newcomers arrive in batches of random sizes (the answers a batch leaves go
to the full call, in order, as the store does); in the other each joins
through the full path (its snapshot deleted before every call). Polls,
releases, setting changes and time passing come between. Every answer, the
rooms' numbers, their lines and their analytics must be the same.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from redis.exceptions import ResponseError

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.scripts import library
from queuegate.store import connect

from .conftest import MakeGate, client_for
from .test_quick_polls import _answer  # answers compared as there

T = TypeVar("T")
T0 = 1_700_000_000_000
_rooms = itertools.count()


class JoinMachine(RuleBasedStateMachine):
    url = ""
    batched = 0  # joins answered by a shared call, and matched
    shared = 0  # calls that answered two joins or more

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = Store(connect(JoinMachine.url, 5.0))
        self.now = T0
        self.rooms: tuple[Room, Room]
        self.visitors: list[str] = []
        self.ids = itertools.count()

    def run(self, coroutine: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coroutine)

    @initialize(
        rate=st.integers(0, 3),
        capacity=st.integers(0, 3),
        abandon=st.sampled_from([0.0, 3.0]),  # (the shortest abandon a room takes)
        forget=st.sampled_from([0.0, 3.0]),
        client_limit=st.sampled_from([0, 4]),
        challenge=st.sampled_from([0, 0, 0, 5]),
    )
    def make_rooms(
        self, rate: int, capacity: int, abandon: float, forget: float, client_limit: int, challenge: int
    ) -> None:
        n = next(_rooms)
        shape = dict(
            paths=["/x"], rate=rate or (0 if capacity else 1), per=1.0, capacity=capacity, session=2.0,
            abandon=abandon, forget=forget, client_limit=client_limit, challenge=challenge,
        )  # fmt: skip
        self.rooms = (Room(f"joins{n}b", **shape), Room(f"joins{n}f", **shape))  # type: ignore[arg-type]
        for room in self.rooms:  # the same seed in both
            self.run(self.store.configure(room, seed="the same seed", now=self.now))

    def full(self, call: Any) -> Any:
        """``call`` on the second room, on the full path."""
        room = self.rooms[1]
        self.run(self.store.client.hdel(self.store.keys(room.name)[4], "quick", "quick_until"))
        return self.run(call(room))

    @rule(
        clients=st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=1, max_size=12),
    )
    def newcomers(self, clients: list[str]) -> None:
        joins = [(f"n{next(self.ids):04d}", client) for client in clients]
        batched = self.rooms[0]
        answers = self.run(self.store.join_many(batched, joins, now=self.now)) or []
        JoinMachine.batched += len(answers)
        JoinMachine.shared += len(answers) >= 2
        for visitor, client in joins[len(answers) :]:
            answers.append(self.run(self.store.enter(batched, visitor, client=client, now=self.now)))
        expected = [
            self.full(lambda room, v=v, c=c: self.store.enter(room, v, client=c, now=self.now))
            for v, c in joins
        ]
        assert [_answer(a) for a in answers] == [_answer(e) for e in expected]
        self.visitors += [v for v, _ in joins]

    @rule(data=st.data())
    def visit(self, data: st.DataObject) -> None:
        if not self.visitors:
            return
        visitor = data.draw(st.sampled_from(self.visitors))
        got = self.run(self.store.enter(self.rooms[0], visitor, now=self.now))
        expected = self.full(lambda room: self.store.enter(room, visitor, now=self.now))
        assert _answer(got) == _answer(expected)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if not self.visitors:
            return
        visitor = data.draw(st.sampled_from(self.visitors))
        got = self.run(self.store.release(self.rooms[0], visitor, now=self.now))
        assert got == self.full(lambda room: self.store.release(room, visitor, now=self.now))

    @rule(ms=st.sampled_from([1, 300, 999, 1000, 1600, 2600, 3100]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(status=st.sampled_from(["open", "paused", "queue_all"]))
    def configure(self, status: str) -> None:
        self.run(self.store.configure(self.rooms[0], status=status, now=self.now))
        self.full(lambda room: self.store.configure(room, status=status, now=self.now))

    @invariant()
    def the_rooms_agree(self) -> None:
        if not hasattr(self, "rooms"):
            return
        batched = self.run(self.store.stats(self.rooms[0], now=self.now))
        assert batched == self.full(lambda room: self.store.stats(room, now=self.now))
        lines = [self.run(self.store.visitors(room, 100)) for room in self.rooms]
        assert lines[0] == lines[1]
        analytics = [self.run(self.store.analytics(room)) for room in self.rooms]
        assert analytics[0] == analytics[1]
        keys = [self.store._base(room.name) + "arrivals" for room in self.rooms]
        arrivals = [self.run(self.store.client.zrange(key, 0, -1, withscores=True)) for key in keys]
        assert arrivals[0] == arrivals[1]
        # Each client's count of tries, and whether it expires.
        clients = [[self.store._base(room.name) + "client:" + c for c in "abc"] for room in self.rooms]
        counts = [self.run(self.store.client.mget(keys)) for keys in clients]
        assert counts[0] == counts[1]
        expiring = [[self.run(self.store.client.pttl(key)) > 0 for key in keys] for keys in clients]
        assert expiring[0] == [count is not None for count in counts[0]] == expiring[1]

    def teardown(self) -> None:
        self.run(self.store.aclose())
        self.loop.close()


def test_joins_sent_together_are_joins_one_by_one(redis_url: str) -> None:
    JoinMachine.url = redis_url
    runner = JoinMachine.TestCase
    # A fixed seed: the paths asserted below are taken by chance.
    runner.settings = settings(max_examples=100, stateful_step_count=30, deadline=None, derandomize=True)
    runner("runTest").runTest()
    assert JoinMachine.batched > 0  # the shared call answered joins, and they matched
    assert JoinMachine.shared > 0  # several in one call


@pytest.mark.anyio
async def test_newcomers_arriving_together_share_a_call(make_gate: MakeGate) -> None:
    # Through the gate: 40 newcomers at once, each from its own client, in a
    # settled room; they get places 1..40 (after the one let in), far fewer
    # calls than joins, and the line holds each of them once.
    room = Room("drop", paths=["/drop"], rate=1, per=3600.0, client_limit=2)
    gate = await make_gate(rooms=[room], trusted_proxies=["127.0.0.1"])
    await gate.store.enter(room, "first")
    await gate.store.enter(room, "second")  # the room is settled now
    before = await script_calls(gate.store)

    async def newcomer(i: int) -> int:
        async with client_for(gate) as client:
            headers = {"accept": "application/json", "x-forwarded-for": f"203.0.113.{i}"}
            answer = await client.get("/drop", headers=headers)
            assert answer.status_code == 503
            assert "qg_drop" in answer.cookies
            return int(answer.json()["position"])

    positions = await asyncio.gather(*(newcomer(i) for i in range(40)))
    after = await script_calls(gate.store)
    assert sorted(positions) == list(range(2, 42))
    assert gate.store.joins.answered == 40
    assert after - before < 20
    line = await gate.store.visitors(room, 100)
    assert len(line["waiting"]) == 41


@pytest.mark.anyio
async def test_joins_sent_together_take_the_checkpoints_one_by_one_would(store: Store) -> None:
    room = Room("checkpoints", paths=["/x"], rate=1, per=3600.0, client_limit=0)
    await store.enter(room, "first", now=T0)  # let in
    await store.enter(room, "second", now=T0)  # arrival number 1, the first checkpoint
    joins = [(f"n{i:03d}", "") for i in range(101)]
    answers = await store.join_many(room, joins[:100], now=T0 + 1)
    assert answers is not None
    assert [a.place for a in answers] == list(range(2, 102))
    assert [a.rank for a in answers] == list(range(1, 101))
    arrivals = await store.client.zrange(store._base(room.name) + "arrivals", 0, -1, withscores=True)
    assert [pair[1] for pair in arrivals] == [1.0, 100.0]  # every hundredth
    # A second later, the first join takes one by time.
    later = await store.join_many(room, joins[100:], now=T0 + 1001)
    assert later is not None
    assert later[0].place == 102
    arrivals = await store.client.zrange(store._base(room.name) + "arrivals", 0, -1, withscores=True)
    assert [pair[1] for pair in arrivals] == [1.0, 100.0, 102.0]
    # A room that is not settled answers none: they are for the full call.
    await store.configure(room, status="paused", now=T0 + 1001)
    assert await store.join_many(room, [("n999", "")], now=T0 + 1001) is None


async def script_calls(store: Store, names: tuple[str, ...] = ("evalsha", "fcall")) -> int:
    """Script calls the store's server has run so far (INFO commandstats)."""
    stats = await store.client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


async def settled_joins(store: Store, name: str) -> list[tuple[str, int]]:
    """Three calls of three newcomers each into a settled room: their answers."""
    room = Room(name, paths=["/x"], rate=1, per=3600.0)
    await store.enter(room, "first")  # let in
    await store.enter(room, "second", join=False)
    await store.enter(room, "second")  # waits; the room is settled now
    answers: list[tuple[str, int]] = []
    for call in range(3):
        got = await store.join_many(room, [(f"n{call}{j}", f"192.0.2.{j}") for j in range(3)])
        assert got is not None
        answers += [(a.state, a.rank) for a in got]
    return answers


@pytest.mark.anyio
async def test_joins_are_a_function_loaded_once(store: Store) -> None:
    # Newcomers' joins and enter go by FCALL of a library each, loaded once
    # (their parts' functions made at the load, not at every call), not by
    # EVALSHA.
    functions = {library(name)[0] for name in ("join", "enter")}
    await store.client.function_flush()
    await store.client.config_resetstat()
    assert await settled_joins(store, "library") == [("waiting", rank) for rank in range(1, 10)]
    stats = await store.client.info("commandstats")
    assert stats["cmdstat_function|load"]["calls"] == 2  # enter's, then join's
    assert stats["cmdstat_fcall"]["calls"] == 8  # three enters, three joins: the first of each found none
    evalsha = await script_calls(store, ("evalsha",))
    room = Room("library", paths=["/x"], rate=1, per=3600.0)
    assert await store.join_many(room, [("n9", "")])
    assert (await store.enter(room, "n9", join=False)).state == "waiting"  # a poll: enter's quick answer
    assert (await store.enter(room, "n10", client="192.0.2.9")).state == "waiting"  # a join one by one
    assert await script_calls(store, ("evalsha",)) == evalsha
    assert await script_calls(store, ("fcall",)) == 11
    loaded = await store.client.function_list()
    assert {entry[1].decode() for entry in loaded} == functions  # library_name
    # Each call has its own clock: a deadline passed is LATE, as for a script.
    keys = store.keys("library")
    for function in functions:
        with pytest.raises(ResponseError, match=r"^LATE"):
            await store.client.fcall(function, len(keys), *keys, "d1", "", "")


@pytest.mark.anyio
async def test_joins_without_functions_go_by_evalsha() -> None:
    # A server with no FUNCTION and FCALL (as before Redis 7) is sent the
    # same script by EVALSHA, with the same answers.
    hidden = ["--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""]
    with EmbeddedServer(server_binary("path"), args=hidden) as server:
        store = Store(aioredis.Redis.from_url(server.url))
        try:
            await store.warm()  # a gate's start: it stopped the app starting
            assert await settled_joins(store, "scripts") == [("waiting", rank) for rank in range(1, 10)]
            assert not store.calls.fcall
            assert await script_calls(store, ("evalsha",)) >= 6
        finally:
            await store.aclose()


@pytest.mark.anyio
async def test_joins_go_by_evalsha_for_a_user_refused_functions(own_server: EmbeddedServer) -> None:
    # An ACL that refuses FUNCTION and FCALL (NOPERM): the same script by EVALSHA.
    with redis.Redis.from_url(own_server.url) as admin:
        admin.acl_setuser("gate", enabled=True, nopass=True, keys=["*"], channels=["*"],
                          commands=["+@all", "-fcall", "-function"])  # fmt: skip
    store = Store(aioredis.Redis.from_url(own_server.url, username="gate"))
    try:
        await store.warm()
        assert await settled_joins(store, "refused") == [("waiting", rank) for rank in range(1, 10)]
        assert not store.calls.fcall
    finally:
        await store.aclose()
