"""Wait and drop-off analytics (scripts/analytics.lua, queuegate.analytics),
driven through the scripts with explicit times, on every kind of server."""

from __future__ import annotations

import pytest

from queuegate import Room, Store
from queuegate.analytics import KEEP_MINUTES, WAIT_BOUNDS_MS, WaitHistogram

from .conftest import ALL_KINDS

SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio

T0 = 1_700_000_020_000  # ms; 20 s before a minute starts
MIN = 60_000


def rate_room(rate: int = 1, per: float = 10.0, **kw: object) -> Room:
    return Room("sale", paths=["/sale"], rate=rate, per=per, abandon=3600.0, **kw)  # type: ignore[arg-type]


def bucket(ms: float) -> int:
    return next((i for i, bound in enumerate(WAIT_BOUNDS_MS) if ms <= bound), len(WAIT_BOUNDS_MS))


async def test_waits_of_those_admitted_land_in_their_buckets(store: Store) -> None:
    room = rate_room(rate=1, per=10.0)
    # v0 goes straight in (a wait of 0); v1..v5 join 2 s apart and are let in
    # one per 10 s: v_k at T0 + 10 s * k.
    for i in range(6):
        await store.enter(room, f"v{i}", now=T0 + 2000 * i)
    for k in range(1, 6):
        await store.stats(room, now=T0 + 10_000 * k)
    figures = await store.analytics(room)
    admitted = figures["waits"]["admitted"]
    expected = [0] + [10_000 * k - 2000 * k for k in range(1, 6)]  # 0, 8, 16, 24, 32, 40 s
    counts = [0] * (len(WAIT_BOUNDS_MS) + 1)
    for ms in expected:
        counts[bucket(ms)] += 1
    assert admitted["counts"] == counts
    assert admitted["count"] == 6
    # Joining times are known to within a second (the checkpoint before them).
    assert sum(expected) <= admitted["sum_ms"] <= sum(expected) + 1000 * 5
    assert figures["waits"]["gave_up"]["count"] == 0


async def test_those_who_gave_up_count_how_long_they_waited(store: Store) -> None:
    room = Room("sale", paths=["/sale"], rate=1, per=10.0, abandon=10.0)
    await store.enter(room, "first", now=T0)  # straight in
    await store.enter(room, "stayer", now=T0 + 1000)  # let in at +10 s
    await store.enter(room, "leaver", now=T0 + 2000)
    await store.enter(room, "silent", now=T0 + 3000)  # polls once more at +7 s, then goes quiet
    await store.enter(room, "silent", now=T0 + 7000)
    await store.leave(room, "leaver", now=T0 + 8000)  # waited 6 s
    # "silent" reaches the front at +20 s, silent for 13 s > abandon: skipped.
    for t in range(T0 + 10_000, T0 + 60_000, 5000):
        await store.stats(room, now=t)
    stats = await store.stats(room, now=T0 + 60_000)
    assert stats["abandoned"] == 1
    assert stats["left"] == 1
    gave_up = (await store.analytics(room))["waits"]["gave_up"]
    assert gave_up["count"] == 2
    # silent: waited 4 s before going quiet; leaver: 6 s before leaving.
    assert gave_up["counts"][bucket(4000)] == 1
    assert gave_up["counts"][bucket(6000)] == 1
    assert 10_000 <= gave_up["sum_ms"] <= 12_000


async def test_estimate_accuracy_counts_estimates_that_held_and_those_that_did_not(store: Store) -> None:
    room = rate_room(rate=1, per=10.0)
    await store.enter(room, "in", now=T0)
    for i in range(4):
        await store.enter(room, f"w{i}", now=T0 + 100 * (i + 1))
    for k in range(1, 5):
        await store.stats(room, now=T0 + 10_000 * k)
    estimate = (await store.analytics(room))["estimate"]
    # A steady rate: the estimates at joining were right.
    assert estimate["checked"] == 4
    assert estimate["accurate"] == 4
    assert estimate["share"] == 1.0

    # The operator halves the rate after people joined: their estimates were
    # too short by half, outside 20 %.
    for i in range(4):
        await store.enter(room, f"x{i}", now=T0 + 40_000 + 100 * (i + 1))
    await store.configure(room, now=T0 + 40_500, per=20.0)
    for k in range(1, 6):
        await store.stats(room, now=T0 + 40_000 + 20_000 * k)
    estimate = (await store.analytics(room))["estimate"]
    assert estimate["checked"] == 8
    assert estimate["accurate"] < 8
    assert estimate["share"] == estimate["accurate"] / 8


async def test_minutes_record_the_line_and_stay_bounded(store: Store) -> None:
    room = rate_room(rate=2, per=60.0)
    start = T0 + 20_000  # a minute's start
    # Minute 0: five join (two straight in, three wait).
    for i in range(5):
        await store.enter(room, f"v{i}", now=start + 1000 * i)
    # Minute 1: two more are let in; one leaves.
    await store.stats(room, now=start + MIN)
    await store.leave(room, "v4", now=start + MIN + 1000)
    # Minute 2 starts.
    await store.stats(room, now=start + 2 * MIN + 1)
    minutes = (await store.analytics(room))["minutes"]
    assert [m["at"] for m in minutes] == [start, start + MIN, start + 2 * MIN]
    first, second, current = minutes
    assert (first["joined"], first["admitted"], first["gave_up"]) == (3, 2, 0)
    assert (first["waiting"], first["active"]) == (3, 2)  # the line at the minute's end
    assert first["eta_max_ms"] > 0
    assert (second["joined"], second["admitted"], second["gave_up"]) == (0, 2, 1)
    assert second["waits"] == 2
    assert 55_000 <= second["wait_avg_ms"] <= 60_000
    assert (second["waiting"], second["active"]) == (0, 4)
    assert current["current"]
    assert current["admitted"] == 0

    # Two days and more of calls, a minute apart: only KEEP_MINUTES are kept.
    for m in range(3, KEEP_MINUTES + 40):
        await store.stats(room, now=start + m * MIN)
    base = f"{store.prefix}:{{sale}}:"
    assert await store.client.llen(base + "minutes") == KEEP_MINUTES
    assert len((await store.analytics(room, minutes=60))["minutes"]) == 60


async def test_arrival_checkpoints_stay_few_whatever_the_line(store: Store) -> None:
    room = rate_room(rate=50, per=1.0)
    base = f"{store.prefix}:{{sale}}:"
    # 3,000 join within 3 s: one checkpoint per second or per 100 joins.
    for i in range(3000):
        await store.enter(room, f"v{i}", now=T0 + i)
    checkpoints = await store.client.zcard(base + "arrivals")
    assert checkpoints <= 3000 // 100 + 4
    # As the line passes them, they go (kept: the one before the head, and after).
    for s in range(1, 70):
        await store.stats(room, now=T0 + 3000 + 1000 * s)
        await store.enter(room, f"late{s}", now=T0 + 3000 + 1000 * s)
    assert await store.client.zcard(base + "arrivals") <= 2 + 69
    admitted = (await store.stats(room, now=T0 + 80_000))["admitted"]
    assert (await store.analytics(room))["waits"]["admitted"]["count"] == admitted


async def test_a_lottery_and_a_template_room_keep_figures_too(store: Store) -> None:
    room = Room("draw", paths=["/d"], rate=1, per=10.0, method="random", forget=3600.0)
    for i in range(5):
        await store.enter(room, f"v{i}", now=T0 + 100 * i)
    for k in range(1, 5):
        await store.stats(room, now=T0 + 10_000 * k)
    figures = await store.analytics(room)
    assert figures["waits"]["admitted"]["count"] == 5
    base = f"{store.prefix}:{{draw}}:"
    for name in ("waits", "arrivals", "minutes"):
        assert 0 < await store.client.pttl(base + name) <= 3_600_000, name


def test_quantiles_read_inside_the_bucket() -> None:
    counts = [0] * (len(WAIT_BOUNDS_MS) + 1)
    counts[0], counts[1] = 50, 50  # 0-5 s and 5-15 s
    histogram = WaitHistogram(tuple(counts), 0)
    assert histogram.quantile(0.5) == 5000
    assert histogram.quantile(0.75) == 10_000
    assert WaitHistogram((0,) * len(counts), 0).quantile(0.5) is None
    beyond = WaitHistogram((0,) * len(WAIT_BOUNDS_MS) + (3,), 0)
    assert beyond.quantile(0.99) == WAIT_BOUNDS_MS[-1]


def test_quantiles_never_pass_the_longest_wait() -> None:
    counts = [0] * (len(WAIT_BOUNDS_MS) + 1)
    counts[1] = 3  # three waits in 5-15 s, all of 6 s
    histogram = WaitHistogram(tuple(counts), 18_000, 6_000)
    assert histogram.quantile(0.99) == 6_000  # read inside the bucket: 14,900
    assert histogram.quantile(0.5) == 6_000
    assert histogram.as_dict()["max_ms"] == 6_000
    assert WaitHistogram(tuple(counts), 18_000).quantile(0.99) == pytest.approx(14_900)  # no max recorded


async def test_the_percentiles_shown_stay_within_the_waits_seen(store: Store) -> None:
    room = rate_room(rate=3, per=10.0)
    for i in range(3):
        await store.enter(room, f"straight{i}", now=T0)  # a wait of 0
    for i in range(3):
        await store.enter(room, f"waiter{i}", now=T0 + 4000)  # let in at +10 s: 6 s
    await store.stats(room, now=T0 + 10_000)
    await store.enter(room, "leaver", now=T0 + 11_000)
    await store.leave(room, "leaver", now=T0 + 13_000)  # gave up after 2 s
    waits = (await store.analytics(room))["waits"]
    admitted, gave_up = waits["admitted"], waits["gave_up"]
    assert admitted["count"] == 6
    assert admitted["max_ms"] == 6_000
    assert [admitted[f"p{q}_ms"] for q in (50, 90, 99)] == [5_000, 6_000, 6_000]
    assert gave_up["max_ms"] == 2_000
    assert gave_up["p99_ms"] == 2_000  # read inside 0-5 s it was 4,950
    # A longer wait raises the max; a shorter one does not lower it.
    await store.enter(room, "late", now=T0 + 14_000)
    await store.stats(room, now=T0 + 20_000)
    await store.enter(room, "early", now=T0 + 20_000)
    assert (await store.analytics(room))["waits"]["admitted"]["max_ms"] == 6_000


async def test_a_batch_admitted_together_gets_each_visitor_s_own_wait(store: Store) -> None:
    room = rate_room(rate=100, per=10.0)
    # 300 join 10 ms apart: 100 straight in, then 100 joined at 1-2 s and 100
    # at 2-3 s, let in together at 10 s (waits 8-9 s) and 20 s (17-18 s).
    for i in range(300):
        await store.enter(room, f"v{i}", now=T0 + 10 * i)
    await store.stats(room, now=T0 + 10_000)
    await store.stats(room, now=T0 + 20_000)
    admitted = (await store.analytics(room))["waits"]["admitted"]
    assert admitted["counts"][:4] == [100, 100, 100, 0]
    assert 100 * 8_000 + 100 * 17_000 <= admitted["sum_ms"] <= 100 * 9_000 + 100 * 18_000 + 200 * 1000
