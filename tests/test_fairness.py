"""The lottery and the pre-queue shuffle: fair, and reproducible from the seed."""

from __future__ import annotations

from collections import Counter

import pytest

from queuegate import Room, Store
from queuegate.fairness import prequeue_order, seed_commitment

from .conftest import ALL_KINDS

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000


async def test_lottery_gives_everyone_waiting_the_same_chance(store: Store) -> None:
    """Who of 8 waiting visitors wins the next slot, over 400 draws with
    fixed seeds: a chi-square test against the uniform distribution."""
    firsts: Counter[int] = Counter()
    for trial in range(400):
        room = Room(f"lot{trial}", paths=["/x"], rate=1, per=1.0, method="random")
        await store.configure(room, seed=f"fixed-seed-{trial}", now=T0)
        await store.enter(room, "in", now=T0)  # takes the one token
        for i in range(8):
            assert (await store.enter(room, f"w{i}", now=T0)).state == "waiting"
        await store.stats(room, now=T0 + 1000)  # the refill: one is drawn
        states = [(await store.enter(room, f"w{i}", now=T0 + 1001)).state for i in range(8)]
        assert states.count("active") == 1
        firsts[states.index("active")] += 1
    expected = 400 / 8
    chi_square = sum((firsts[i] - expected) ** 2 / expected for i in range(8))
    assert chi_square < 24.32, (chi_square, firsts)  # p = 0.001 with 7 degrees of freedom


async def test_lottery_admits_everyone_once_and_replays_from_its_seed(store: Store) -> None:
    orders = []
    for name in ("replay-a", "replay-b"):
        room = Room(name, paths=["/x"], rate=2, per=1.0, method="random")
        await store.configure(room, seed="the-same-seed", now=T0)
        await store.enter(room, "a", now=T0)
        await store.enter(room, "b", now=T0)
        for i in range(10):
            await store.enter(room, f"w{i}", now=T0)
        admitted: list[str] = []
        for step in range(1, 6):
            await store.stats(room, now=T0 + step * 1000)
            active = await store.visitors(room, 100)
            admitted += sorted(v for v, _ in active["active"] if v not in admitted and v not in "ab")
        assert sorted(admitted) == sorted(f"w{i}" for i in range(10))
        orders.append(admitted)
    assert orders[0] == orders[1]


async def test_prequeue_waits_then_shuffles_once_by_the_published_rule(store: Store) -> None:
    opening = T0 + 10_000
    room = Room("drop", paths=["/drop"], rate=5, per=1.0, opens_at=opening / 1000)
    seed = "published-after-the-event"
    await store.configure(room, seed=seed, now=T0)
    early = [f"early{i:02d}" for i in range(20)]
    for i, visitor in enumerate(early):
        outcome = await store.enter(room, visitor, now=T0 + i)
        assert outcome.state == "prequeue"
        assert outcome.opens_at_ms == opening
        assert outcome.seed_sha256 == seed_commitment(seed)
    assert (await store.enter(room, "early05", now=T0 + 100)).line == 20
    # At the opening: the order is the published rule's, and 5 get in.
    late = await store.enter(room, "late", now=opening)
    order = prequeue_order(seed, early)
    visitors = await store.visitors(room, 100)
    assert sorted(v for v, _ in visitors["active"]) == sorted(order[:5])
    assert [v for v, _ in visitors["waiting"]] == [*order[5:], "late"]
    assert (late.state, late.rank) == ("waiting", 15)
    # Once: later calls keep the order.
    await store.enter(room, "late", now=opening + 1000)
    visitors = await store.visitors(room, 100)
    assert [v for v, _ in visitors["waiting"]] == [*order[10:], "late"]
    assert await store.seed(room) == seed


async def test_every_room_gets_a_secret_seed_of_its_own(store: Store) -> None:
    a = Room("seed-a", paths=["/a"], rate=1, method="random")
    b = Room("seed-b", paths=["/b"], rate=1, method="random")
    await store.enter(a, "v")
    await store.enter(b, "v")
    seed_a, seed_b = await store.seed(a), await store.seed(b)
    assert seed_a
    assert seed_b
    assert seed_a != seed_b
    assert (await store.stats(a))["seed_sha256"] == seed_commitment(seed_a)
