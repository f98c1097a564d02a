"""Quick polls (poll.lua): a waiting visitor's poll in a settled room is
answered from the snapshot the last full call left, and must get exactly the
answer the full path would give at that moment.

The machine below drives rooms of every shape through random joins, polls,
releases, drains, setting changes and time passing; at every poll of someone
waiting it asks again at the same moment with the snapshot deleted (so the
full path answers) and compares. (Only quick answers are compared: the full
path itself may move the line again at the same moment, when max_step was
spent on visitors who had gone.)
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from queuegate import Room, Store
from queuegate.store import Outcome, connect

from .conftest import ALL_KINDS

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

T = TypeVar("T")
T0 = 1_700_000_000_000
VISITORS = [f"v{i}" for i in range(8)]
_rooms = itertools.count()


def _answer(outcome: Outcome) -> tuple[object, ...]:
    return (outcome.state, outcome.rank, outcome.line, outcome.eta_ms, outcome.poll_ms, outcome.method)


class QuickMachine(RuleBasedStateMachine):
    url = ""
    quick_answers = 0

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = Store(connect(QuickMachine.url, 5.0))
        self.now = T0
        self.room: Room

    def run(self, coroutine: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coroutine)

    @initialize(
        rate=st.integers(0, 3),
        capacity=st.integers(0, 3),
        session=st.sampled_from([1.5, 4.0]),
        sliding=st.booleans(),
        abandon=st.sampled_from([0.0, 2.5]),
        method=st.sampled_from(["fifo", "random"]),
        max_step=st.sampled_from([1, 1000]),
        forget=st.sampled_from([0.0, 3.0]),
    )
    def make_room(
        self, rate: int, capacity: int, session: float, sliding: bool, abandon: float,
        method: str, max_step: int, forget: float,
    ) -> None:  # fmt: skip
        self.room = Room(
            f"quick{next(_rooms)}", paths=["/x"], rate=rate or (0 if capacity else 1), per=1.0,
            capacity=capacity, session=session, sliding=sliding, abandon=abandon, method=method,
            max_step=max_step, forget=forget, client_limit=0,
        )  # fmt: skip

    @property
    def state_key(self) -> str:
        return self.store.keys(self.room.name)[4]

    @rule(visitor=st.sampled_from(VISITORS))
    def visit(self, visitor: str) -> None:
        until = self.run(self.store.client.hget(self.state_key, "quick_until"))
        outcome = self.run(self.store.enter(self.room, visitor, now=self.now))
        if outcome.state != "waiting" or until is None or self.now >= int(until) or outcome.joined:
            return  # a full answer (a join's comes before the line could take the newcomer)
        self.run(self.store.client.hdel(self.state_key, "quick", "quick_until"))
        again = self.run(self.store.enter(self.room, visitor, now=self.now))
        assert _answer(again) == _answer(outcome), visitor
        QuickMachine.quick_answers += 1

    @rule(ms=st.sampled_from([1, 300, 999, 1000, 1600, 2600]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule(visitor=st.sampled_from(VISITORS))
    def release(self, visitor: str) -> None:
        self.run(self.store.release(self.room, visitor, now=self.now))

    @rule()
    def drain(self) -> None:
        self.run(self.store.drain(self.room, now=self.now))

    @rule()
    def stats(self) -> None:
        self.run(self.store.stats(self.room, now=self.now))

    @rule(status=st.sampled_from(["open", "paused", "queue_all"]), rate=st.integers(1, 4))
    def configure(self, status: str, rate: int) -> None:
        changes: dict[str, Any] = {"status": status}
        if self.room.rate:
            changes["rate"] = rate
        self.run(self.store.configure(self.room, now=self.now, **changes))

    def teardown(self) -> None:
        self.run(self.store.aclose())
        self.loop.close()


def test_quick_answers_are_the_full_answers(redis_url: str) -> None:
    QuickMachine.url = redis_url
    runner = QuickMachine.TestCase
    runner.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
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
async def test_a_configured_rate_reaches_the_next_poll(store: Store) -> None:
    room = Room("reconfigured", paths=["/x"], rate=1, per=60.0)
    for v in ("a", "b", "c", "d"):
        await store.enter(room, v, now=T0)
    before = await store.enter(room, "d", now=T0 + 100)
    await store.configure(room, rate=3, now=T0 + 200)
    after = await store.enter(room, "d", now=T0 + 300)
    assert after.eta_ms < before.eta_ms - 60_000  # one interval, not three
