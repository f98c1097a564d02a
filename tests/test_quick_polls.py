"""Quick answers (quick.lua): a waiting visitor's poll, or a newcomer's join,
in a settled room is answered from the snapshot the last full call left, and
must get exactly the answer, and leave exactly the room, that the full path
would.

The machine below drives two rooms of the same shape in lockstep through
random joins, polls, releases, drains, setting changes and time passing: one
as the gate does, one whose snapshot is deleted before every call (so the
full path always answers). Every answer and the rooms' numbers after every
step must be the same. The first room's calls go as the gate sends them
(FCALL of a function library, where the server has functions), the
second's by EVALSHA of the same scripts: a library runs a part's lines
marked "per call" at each call, and any state one call left to the next
would show here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from queuegate import Room, Store
from queuegate.store import Outcome, connect

from .conftest import ALL_KINDS

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

T = TypeVar("T")
T0 = 1_700_000_000_000
VISITORS = [f"v{i}" for i in range(8)]
_rooms = itertools.count()


class QuickMachine(RuleBasedStateMachine):
    url = ""
    quick_answers = 0  # answers that came from a snapshot, and matched

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = Store(connect(QuickMachine.url, 5.0))
        self.scripts = Store(connect(QuickMachine.url, 5.0))  # the full room's: EVALSHA only
        self.scripts.calls.fcall = False
        self.now = T0
        self.rooms: tuple[Room, Room]

    def run(self, coroutine: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coroutine)

    @initialize(
        rate=st.integers(0, 3),
        capacity=st.integers(0, 3),
        session=st.sampled_from([1.5, 4.0]),
        sliding=st.booleans(),
        abandon=st.sampled_from([0.0, 3.0]),  # (the shortest abandon a room takes)
        method=st.sampled_from(["fifo", "random"]),
        max_step=st.sampled_from([1, 1000]),
        forget=st.sampled_from([0.0, 3.0]),
        client_limit=st.sampled_from([0, 3]),
    )
    def make_rooms(
        self, rate: int, capacity: int, session: float, sliding: bool, abandon: float,
        method: str, max_step: int, forget: float, client_limit: int,
    ) -> None:  # fmt: skip
        n = next(_rooms)
        shape = dict(
            paths=["/x"], rate=rate or (0 if capacity else 1), per=1.0, capacity=capacity,
            session=session, sliding=sliding, abandon=abandon, method=method, max_step=max_step,
            forget=forget, client_limit=client_limit,
        )  # fmt: skip
        self.rooms = (Room(f"quick{n}q", **shape), Room(f"quick{n}f", **shape))  # type: ignore[arg-type]
        for room in self.rooms:  # the same lottery in both
            self.run(self.store.configure(room, seed="the same seed", now=self.now))

    def both(self, call: Any) -> tuple[Any, Any]:
        quick, full = self.rooms
        answer = self.run(call(self.store, quick))
        state = self.store.keys(full.name)[4]
        self.run(self.store.client.hdel(state, "quick", "quick_until"))
        return answer, self.run(call(self.scripts, full))

    @rule(visitor=st.sampled_from(VISITORS), client=st.sampled_from(["a", "b"]))
    def visit(self, visitor: str, client: str) -> None:
        state = self.store.keys(self.rooms[0].name)[4]
        until = self.run(self.store.client.hget(state, "quick_until"))
        quick, full = self.both(lambda store, room: store.enter(room, visitor, client=client, now=self.now))
        assert _answer(quick) == _answer(full), visitor
        QuickMachine.quick_answers += until is not None and self.now < int(until)

    @rule(ms=st.sampled_from([1, 300, 999, 1000, 1600, 2600, 3100]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(visitor=st.sampled_from(VISITORS))
    def release(self, visitor: str) -> None:
        quick, full = self.both(lambda store, room: store.release(room, visitor, now=self.now))
        assert quick == full

    @rule()
    def drain(self) -> None:
        quick, full = self.both(lambda store, room: store.drain(room, now=self.now))
        assert quick == full

    @rule(status=st.sampled_from(["open", "paused", "queue_all"]), rate=st.integers(1, 4))
    def configure(self, status: str, rate: int) -> None:
        changes: dict[str, Any] = {"status": status}
        if self.rooms[0].rate:
            changes["rate"] = rate
        self.both(lambda store, room: store.configure(room, now=self.now, **changes))

    @invariant()
    def the_rooms_agree(self) -> None:
        if not hasattr(self, "rooms"):
            return
        quick, full = self.both(lambda store, room: store.stats(room, now=self.now))
        assert quick == full
        lines = [self.run(self.store.visitors(room, 100)) for room in self.rooms]
        assert lines[0] == lines[1]
        # The same keys, with an expiry (a forgetting room) or without.
        ttls = [
            [min(self.run(self.store.client.pttl(key)), 0) for key in self.store.keys(room.name)]
            for room in self.rooms
        ]
        assert ttls[0] == ttls[1]

    def teardown(self) -> None:
        self.run(self.store.aclose())
        self.run(self.scripts.aclose())
        self.loop.close()


def _answer(outcome: Outcome) -> dict[str, Any]:
    answer = dataclasses.asdict(outcome)
    if outcome.state == "limited":  # a real-time TTL, read a moment apart
        answer["eta_ms"] = outcome.eta_ms > 0
    return answer


def test_quick_answers_are_the_full_answers(redis_url: str) -> None:
    QuickMachine.url = redis_url
    runner = QuickMachine.TestCase
    # A fixed seed: the paths asserted below are taken by chance.
    runner.settings = settings(max_examples=120, stateful_step_count=40, deadline=None, derandomize=True)
    runner("runTest").runTest()
    assert QuickMachine.quick_answers > 0  # the quick path was taken, and checked


@pytest.mark.anyio
async def test_a_quick_poll_proves_the_visitor_is_here(store: Store) -> None:
    room = Room("present", paths=["/x"], rate=1, per=10.0, abandon=30.0)
    for v in ("a", "b", "c"):
        await store.enter(room, v, now=T0)
    seen = store.keys(room.name)[2]
    assert await store.client.hget(store.keys(room.name)[4], "quick_until") is not None
    outcome = await store.enter(room, "c", now=T0 + 500)
    assert (outcome.state, outcome.rank) == ("waiting", 1)
    assert await store.client.zscore(seen, "c") == T0 + 500


@pytest.mark.anyio
async def test_a_forgetting_room_is_renewed_by_a_full_call_every_half_forget(store: Store) -> None:
    # Keys of a room with `forget` live that long past the last full call; a
    # quick poll renews nothing, so the snapshot lasts half of `forget` at most.
    room = Room("forgetful", paths=["/x"], rate=1, per=3600.0, forget=4.0)
    for v in ("a", "b"):
        await store.enter(room, v, now=T0)
    seq = store.keys(room.name)[0]
    await store.client.pexpire(seq, 1_000_000)
    await store.enter(room, "b", now=T0 + 1000)  # quick: renews nothing
    assert await store.client.pttl(seq) > 10_000
    await store.enter(room, "b", now=T0 + 2500)  # past half of forget: the full path
    assert 0 < await store.client.pttl(seq) <= 4000


@pytest.mark.anyio
async def test_a_quick_join_into_an_empty_line_of_a_forgetting_room_gives_its_keys_an_expiry(
    store: Store,
) -> None:
    room = Room("forgetful-join", paths=["/x"], rate=1, per=3600.0, forget=60.0)
    await store.enter(room, "a", now=T0)  # straight in; nobody else until the refill
    await store.enter(room, "b", now=T0)
    await store.drain(room, now=T0 + 1)  # settles the room with an empty line
    state = store.keys(room.name)[4]
    assert await store.client.hget(state, "quick_until") is not None
    joined = await store.enter(room, "c", now=T0 + 2)
    assert (joined.state, joined.rank, joined.joined) == ("waiting", 0, True)
    for key in store.keys(room.name):
        assert 0 < await store.client.pttl(key) <= 60_000, key


@pytest.mark.anyio
async def test_a_configured_rate_reaches_the_next_poll(store: Store) -> None:
    room = Room("reconfigured", paths=["/x"], rate=1, per=60.0)
    for v in ("a", "b", "c", "d"):
        await store.enter(room, v, now=T0)
    before = await store.enter(room, "d", now=T0 + 100)
    await store.configure(room, rate=3, now=T0 + 200)
    after = await store.enter(room, "d", now=T0 + 300)
    assert after.eta_ms < before.eta_ms - 60_000  # one interval, not three
