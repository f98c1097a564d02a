"""The admission controller (health.lua) against a simulated plant: a backend
of known capacity whose latency climbs as its load nears it, fed by the
visitors the controller admits, each making requests for a while after
admission. Time is simulated (every call passes ``now``), the reports are
computed, the rule runs in real Redis: fast and deterministic."""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import AsyncIterator

import httpx
import pytest

from queuegate import Health, QueueGate, Room
from queuegate.health import BOUNDS_MS
from queuegate.store import Store, connect

from .conftest import SECRET, served

pytestmark = pytest.mark.anyio

T0 = 1_900_000_000_000  # ms, simulated
VISIT = 6  # seconds an admitted visitor makes requests for
REQUESTS = 4  # requests per visitor, spread over the visit


def room(**kw: object) -> Room:
    options: dict[str, object] = {
        "rate": 5,
        "per": 1.0,
        "abandon": 3600.0,
        "target": Health(p95_ms=300, max_error_rate=0.02, floor=2, ceiling=200),
    }
    options.update(kw)
    return Room("plant", paths=["/p"], **options)  # type: ignore[arg-type]


def buckets(count: int, latency_ms: float) -> list[int]:
    out = [0] * (len(BOUNDS_MS) + 1)
    out[bisect.bisect_left(BOUNDS_MS, latency_ms)] = count
    return out


class Plant:
    """Requests/s from the last VISIT seconds of admissions; p95 latency of a
    queue at that load: 50 ms x 1/(1 - load/capacity), runaway at capacity;
    it completes at most its capacity."""

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.admitted: deque[float] = deque([0.0] * VISIT, maxlen=VISIT)
        self.error_share = 0.0

    def second(self, rate: float) -> tuple[int, int, float]:
        load, errors, p95, _ = self.step(rate)
        return load, errors, p95

    def step(self, rate: float) -> tuple[int, int, float, int]:
        """(completed, errors among them, p95 ms, started) this second."""
        self.admitted.append(rate)
        load = sum(self.admitted) * REQUESTS / VISIT
        busy = load / self.capacity
        p95 = 5000.0 if busy >= 0.98 else min(5000.0, 50 / (1 - busy))
        done = min(load, self.capacity)  # what it completes: never more than it can
        return round(done), round(done * self.error_share), p95, round(load)


async def run(
    store: Store, the_room: Room, plant: Plant, seconds: int, start: int
) -> list[tuple[int, float]]:
    """Simulated seconds: the plant's report each second; (rate, p95) per second."""
    trace = []
    for second in range(start, start + seconds):
        now = T0 + second * 1000
        rate = (await store.stats(the_room, now=now))["rate"]
        assert rate == int(rate), rate  # whole visitors: the line takes no fractions
        done, errors, p95, started = plant.step(rate)
        if done:
            await store.report(
                the_room, done, errors, buckets(done, p95), buckets(done, p95 / 2), None, started, now=now
            )
        trace.append((rate, p95))
    return trace


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    s = Store(connect(redis_url, 5.0), prefix=f"qgh{time.time_ns()}")
    yield s
    await s.aclose()


async def fill_line(store: Store, the_room: Room, n: int = 20_000) -> None:
    """People waiting (the controller only raises the value while some do)."""
    await store.stats(the_room, now=T0)
    keys = store.keys(the_room.name)
    members = {f"v{i}": i for i in range(n)}
    await store.client.zadd(keys[1], members)
    await store.client.zadd(keys[2], {m: T0 for m in members})


async def test_it_converges_below_the_target_from_a_low_start(store: Store) -> None:
    the_room = room()
    await fill_line(store, the_room)
    plant = Plant(capacity=100)  # req/s: 25 visitors/s at most, and fewer keep p95 under 300 ms
    trace = await run(store, the_room, plant, 120, 0)
    late = trace[60:]
    rates = [rate for rate, _ in late]
    assert min(rates) >= 12, rates  # went up from 5, with evidence
    assert max(rates) <= 25, rates  # never into runaway
    above = sum(p95 > 300 for _, p95 in late) / len(late)
    assert above <= 0.15, (above, trace)


async def test_it_backs_off_when_latency_steps_up(store: Store) -> None:
    the_room = room(rate=20)
    await fill_line(store, the_room)
    plant = Plant(capacity=100)
    await run(store, the_room, plant, 40, 0)
    plant.capacity = 40  # the database slows down: 10 visitors/s at most
    trace = await run(store, the_room, plant, 40, 40)
    rates = [rate for rate, _ in trace]
    assert rates[-1] <= 10, rates
    settled = next(i for i, (_, p95) in enumerate(trace) if all(p <= 300 for _, p in trace[i:]))
    assert settled <= 30, trace


async def test_it_climbs_when_the_app_gets_faster_without_running_away(store: Store) -> None:
    """The app gets four times faster after an overload: the rate climbs to
    the new level (latency-sized steps up to 0.9 of the last overload,
    probes of a quarter at most past it), never into runaway."""
    the_room = room(rate=8)
    await fill_line(store, the_room)
    plant = Plant(capacity=40)  # 8 visitors/s keep p95 under 300 ms
    await run(store, the_room, plant, 40, 0)
    plant.capacity = 160  # now up to 33 a second
    trace = await run(store, the_room, plant, 40, 40)
    rates = [rate for rate, _ in trace]
    assert max(rates[:25]) >= 26, rates  # 0.8 of the new level within 25 s
    assert max(rates) <= 39, rates  # never into runaway (at 40 a second the plant is full)
    above = sum(p95 > 300 for _, p95 in trace) / len(trace)
    assert above <= 0.15, (above, trace)


class Pool(Plant):
    """A pool of workers: its latency stays flat until it is full, then the
    queue runs away; nothing but an overload shows where the knee is."""

    def step(self, rate: float) -> tuple[int, int, float, int]:
        done, errors, _, started = super().step(rate)
        busy = sum(self.admitted) * REQUESTS / VISIT / self.capacity
        return done, errors, 5000.0 if busy > 1 else 100.0, started


async def test_past_an_old_overload_probes_grow_while_they_find_room(store: Store) -> None:
    """The app overloads at 3 visitors a second, then gets five times
    bigger: probes past the old overload point grow with each one that did
    not overload (probes of a visitor at a time took 41 s to get there)."""
    the_room = room(rate=5)
    await fill_line(store, the_room)
    plant = Pool(capacity=12)  # 3 visitors/s fill it
    await run(store, the_room, plant, 40, 0)
    plant.capacity = 64  # now 16 a second
    trace = await run(store, the_room, plant, 40, 40)
    rates = [rate for rate, _ in trace]
    assert rates[0] <= 4, rates  # it had found the small pool
    assert max(rates[:35]) >= 13, rates  # 0.8 of the new level within 35 s
    stats = await store.stats(the_room, now=T0 + 80_000)
    assert stats["rate"] <= 20, (stats, rates)  # an overshoot is cut back


class QueuedPool(Plant):
    """A pool of workers whose latency stays at its base until it is full;
    past that, what it is given beyond what it completes waits, and the
    latency grows with that backlog (the benchmark's backend)."""

    BASE_MS = 250.0

    def __init__(self, capacity: float) -> None:
        super().__init__(capacity)
        self.backlog = 0.0  # requests waiting for a worker

    def step(self, rate: float) -> tuple[int, int, float, int]:
        self.admitted.append(rate)
        started = sum(self.admitted) * REQUESTS / VISIT
        done = min(started + self.backlog, self.capacity)
        self.backlog += started - done
        p95 = self.BASE_MS + 1000 * self.backlog / self.capacity
        return round(done), 0, min(p95, 5000.0), round(started)


async def test_a_queue_forming_is_drained_before_the_target_is_crossed(store: Store) -> None:
    """Given a sixth more than a pool completes: a queue forms, and the
    latency climbs a sixth of a second each second. The rate comes down when
    the queue shows (the pool completes less than it is given, by more than
    chance), before the latency crosses the target, to a little under what
    the pool completes. Waiting for the target to be crossed cut a second
    later, from a longer queue (its latency peaked at 833 ms, not 750), to
    two thirds of what the pool completes (8 a second, not 10): visitors
    admitted earlier keep coming for a while, so the latency still goes
    over the target for a few seconds either way."""
    target = Health(p95_ms=600, floor=2, ceiling=14)  # no raise: the queue forms at 14
    the_room = room(rate=14, target=target)
    await fill_line(store, the_room)
    plant = QueuedPool(capacity=48)  # 12 visitors a second fill it
    trace = await run(store, the_room, plant, 20, 0)
    rates = [rate for rate, _ in trace]
    first_cut = next(i for i, rate in enumerate(rates) if rate < 14)
    # The look that cut saw the second before: under the target.
    assert trace[first_cut - 1][1] < 600, (first_cut, trace)
    assert 10 <= rates[first_cut] < 12, (first_cut, rates)  # a little under what it completes
    assert max(p95 for _, p95 in trace) < 800, trace


async def overload_point(store: Store, the_room: Room) -> float:
    """Where the controller last saw the app overload, in visitors a second
    (the controller's own state: what its raises stop under)."""
    served = await store.client.hget(store.keys(the_room.name)[0].removesuffix("seq") + "health", "served")
    assert served is not None
    return float(served)


async def test_what_the_app_completes_is_read_at_the_rate_its_requests_came_in_at(store: Store) -> None:
    """Doubling from 10 to 20 a second overloads a pool that completes 10.75
    visitors a second. The requests of the moment come from visitors
    admitted over the last round trip, mostly at 10: what the pool keeps up
    with is that mean rate times the share it completes (10.75 read 12.2).
    Read at the rate of the moment, it was 15.6: every later climb then
    went straight past the pool, to 14, before it probed at all."""
    target = Health(p95_ms=600, floor=1, ceiling=200, settle=6)
    the_room = room(rate=5, target=target)
    await fill_line(store, the_room)
    plant = QueuedPool(capacity=43)  # 10.75 visitors a second fill it
    trace = await run(store, the_room, plant, 8, 0)
    assert max(rate for rate, _ in trace) == 20, trace  # it did double into the overload
    assert 0.9 * 10.75 <= await overload_point(store, the_room) <= 1.15 * 10.75, trace


async def test_a_slight_overload_is_eased_before_the_target_is_crossed(store: Store) -> None:
    """11 a second into a pool that completes 10.75: a queue grows by a
    request a second, too little a shortfall to tell from chance, and the
    latency creeps up. Near the target and still rising, one visitor less
    (Vegas's decrease), so the target is never crossed. Waiting for the
    crossing cut to 7 (by CUBIC's 0.7) each time, twice a minute."""
    target = Health(p95_ms=600, floor=1, ceiling=11, settle=6)
    the_room = room(rate=11, target=target)
    await fill_line(store, the_room)
    plant = QueuedPool(capacity=43)
    trace = await run(store, the_room, plant, 60, 0)
    assert max(p95 for _, p95 in trace) < 600, trace
    assert min(rate for rate, _ in trace) == 10, trace  # eased by one, not cut by 0.7


async def test_it_backs_off_on_an_error_burst(store: Store) -> None:
    the_room = room(rate=15)
    await fill_line(store, the_room)
    plant = Plant(capacity=1000)  # latency is fine; errors are not
    plant.error_share = 0.2
    trace = await run(store, the_room, plant, 30, 0)
    assert trace[-1][0] < 15
    stats = await store.stats(the_room, now=T0 + 30_000)
    assert stats["health_changed"].startswith("cut: error rate")


async def test_requests_in_flight_count_at_their_age(store: Store) -> None:
    """A pile-up shows at the next look, before its slow requests finish."""
    the_room = room(rate=20)
    await fill_line(store, the_room)
    stuck = buckets(30, 1500)  # 30 requests 1.5 s old and counting
    await store.report(the_room, 10, 0, buckets(10, 50), buckets(10, 50), stuck, 40, now=T0)
    stats = await store.stats(the_room, now=T0)
    assert stats["p95_ms"] >= 1000, stats
    assert stats["rate"] < 20
    assert stats["health_changed"].startswith("cut: p95")


async def test_the_figures_cover_the_last_seconds_only(store: Store) -> None:
    """A second of slow responses before traffic fell does not outvote the
    few fast ones after it (a faded histogram weighed by count would)."""
    the_room = room(rate=20)
    await fill_line(store, the_room)
    await store.configure(the_room, rate=20, now=T0)  # pinned: the figures alone
    await store.report(the_room, 200, 0, buckets(200, 1000), buckets(200, 1000), now=T0)
    assert (await store.stats(the_room, now=T0))["p95_ms"] >= 900
    await store.report(the_room, 5, 0, buckets(5, 50), buckets(5, 50), now=T0 + 1000)
    assert (await store.stats(the_room, now=T0 + 1000))["p95_ms"] >= 900  # the last 1-2 s
    await store.report(the_room, 5, 0, buckets(5, 50), buckets(5, 50), now=T0 + 2000)
    assert (await store.stats(the_room, now=T0 + 2000))["p95_ms"] < 100


async def test_a_cut_starts_from_what_the_app_keeps_up_with(store: Store) -> None:
    """Admitting four times what the app completes: the cut goes below what
    it completes (so the queue drains), not to a share of the rate that
    overloaded it."""
    the_room = room(rate=20)
    await fill_line(store, the_room)
    # p95 just over the 300 ms target (g ~ 0.95); a quarter of what started
    # completed.
    await store.report(the_room, 10, 0, buckets(10, 320), buckets(10, 100), None, 40, now=T0)
    stats = await store.stats(the_room, now=T0)
    assert stats["rate"] == 3, stats  # 0.7 (at least CUBIC's cut) x 20 x 10/40
    # The same where the app keeps up: a cut by 0.7.
    fresh = Room("plant2", paths=["/q"], rate=20, per=1.0, abandon=3600.0, target=the_room.target)
    await fill_line(store, fresh)
    await store.report(fresh, 10, 0, buckets(10, 320), buckets(10, 100), None, 10, now=T0)
    assert (await store.stats(fresh, now=T0))["rate"] == 14


async def test_after_a_cut_what_the_app_keeps_up_with_is_read_at_the_lower_rate(store: Store) -> None:
    """After a cut, the requests of the moment come from visitors admitted
    at the old rate and the new one; what the app keeps up with is read at
    the lower of the round trip's mean and the rate now, so that a second
    cut (the p95 still rising a third of a round trip later) drains the
    queue. Read at the mean alone, a pool that fell to a third was given
    more than it served for six more seconds in the benchmark, and the
    p95 sat at the pool's 2 s limit."""
    the_room = room(rate=20)  # settle 10 s
    await fill_line(store, the_room)
    await store.report(the_room, 10, 0, buckets(10, 320), buckets(10, 100), None, 10, now=T0)
    assert (await store.stats(the_room, now=T0))["rate"] == 14  # the cut: 0.7 x 20
    # 4 s later: the p95 still rising, half of what started completed. The
    # mean of the round trip is still near 20 (16.7); the rate is 14.
    await store.report(the_room, 10, 0, buckets(10, 450), buckets(10, 100), None, 20, now=T0 + 4000)
    stats = await store.stats(the_room, now=T0 + 4000)
    assert stats["health_changed"].endswith("to what the app completes"), stats
    assert stats["rate"] == 6, stats  # 0.9 x 14 x 10/20 (at the mean: 0.9 x 16.7 x 10/20 = 7)


async def test_a_queue_drained_in_the_last_second_is_not_cut_again(store: Store) -> None:
    """The figures cover the last one to two seconds, so they lag a queue
    that has drained by a second: a round trip after a cut, the window
    before still over the target but the current one under it is a queue
    that drained (hold, "falling"), not a reason for a second cut."""
    the_room = room(rate=20)  # settle 10 s
    await fill_line(store, the_room)
    slow, fast = buckets(100, 400), buckets(100, 100)  # g = 0.75: a cut by 0.7
    await store.report(the_room, 100, 0, slow, slow, None, 100, now=T0)
    assert (await store.stats(the_room, now=T0))["rate"] == 14  # the cut
    await store.report(the_room, 100, 0, slow, slow, None, 100, now=T0 + 9_000)
    # A round trip after the cut: the window before is slow, the current fast.
    await store.report(the_room, 100, 0, fast, fast, None, 100, now=T0 + 10_000)
    stats = await store.stats(the_room, now=T0 + 10_000)
    assert stats["p95_ms"] >= 350, stats  # both windows: still over the target
    assert stats["rate"] == 14, stats
    assert stats["health_reason"].endswith(", and falling"), stats
    # Both windows slow: a second cut.
    await store.report(the_room, 100, 0, slow, slow, None, 100, now=T0 + 11_000)
    await store.report(the_room, 100, 0, slow, slow, None, 100, now=T0 + 12_000)
    assert (await store.stats(the_room, now=T0 + 12_000))["rate"] < 14


async def test_near_the_last_overload_a_busy_app_gets_no_probe(store: Store) -> None:
    """At 0.9 of the rate where the app last overloaded, a probe is a bet
    that it has grown. A latency past halfway from its base to the headroom
    says it is busy at this rate already: hold. At its base: probe."""
    the_room = room(rate=20)  # target 300 ms: the headroom is 240
    await fill_line(store, the_room)
    await store.report(the_room, 100, 0, buckets(100, 400), buckets(100, 200), None, 100, now=T0)
    assert (await store.stats(the_room, now=T0))["rate"] == 14  # served: 20
    at = T0
    rate = 14
    for _ in range(60):  # slow start back to 0.9 of 20, on fast responses (the base: 50 ms)
        at += 1000
        rate, _ = await store.report(the_room, 50, 0, buckets(50, 50), buckets(50, 20), None, 50, now=at)
        if rate >= 18:
            break
    assert rate == 18
    busy = buckets(50, 170)  # past (50 + 240) / 2
    for _ in range(12):  # a round trip and more
        at += 1000
        rate, reason = await store.report(the_room, 50, 0, busy, buckets(50, 20), None, 50, now=at)
    assert rate == 18
    assert reason == "hold: near where the app last overloaded, and busy"
    for _ in range(12):  # back at its base: a probe
        at += 1000
        rate, _ = await store.report(the_room, 50, 0, buckets(50, 50), buckets(50, 20), None, 50, now=at)
    assert rate > 18


async def test_past_the_last_overload_probes_start_at_one_visitor(store: Store) -> None:
    """Past 0.9 of where the app last overloaded, a probe adds one visitor,
    then 2, 4, 8 with each probe in a row that did not overload. A first
    probe of a quarter (BBR's gain) overshot a pool near its knee by two
    or three visitors at 10-16 a second: in the simulated benchmark
    (``python -m benchmarks.adaptive_sim``, 32 seeds) phase 1 spent 22 % of
    its seconds over the target with it, 14 % with probes from one."""
    the_room = room(rate=20)
    await fill_line(store, the_room)
    await store.report(the_room, 100, 0, buckets(100, 400), buckets(100, 200), None, 100, now=T0)
    assert (await store.stats(the_room, now=T0))["rate"] == 14  # served: 20
    at, rate = T0, 14
    rates: list[int] = []
    for _ in range(80):  # fast responses (the base: 50 ms): slow start to 18, then probes
        at += 1000
        rate, _ = await store.report(the_room, 50, 0, buckets(50, 50), buckets(50, 20), None, 50, now=at)
        if not rates or rate != rates[-1]:
            rates.append(rate)
        if rate >= 25:
            break
    assert rates == [14, 18, 19, 21, 25], rates


async def test_a_busy_app_starts_the_probes_count_again(store: Store) -> None:
    """Probes in a row grow (+1, +2, +4); a look at a busy app near the last
    overload (the p95 past halfway from its base to the headroom) says the
    knee is near, as a p95 near the target does: the next probe is one
    visitor again, not the next of the series (in the real benchmark, 14
    -> 18 into a pool that serves 16)."""
    the_room = room(rate=20)  # target 300 ms: the headroom is 240
    await fill_line(store, the_room)
    await store.report(the_room, 100, 0, buckets(100, 400), buckets(100, 200), None, 100, now=T0)
    at, rate = T0, 14
    fast, busy = buckets(50, 50), buckets(50, 170)  # the base; past (50 + 240) / 2
    while rate < 21:  # slow start to 18, then probes +1 and +2
        at += 1000
        rate, _ = await store.report(the_room, 50, 0, fast, buckets(50, 20), None, 50, now=at)
    assert rate == 21
    for _ in range(12):  # a round trip and more, busy
        at += 1000
        rate, reason = await store.report(the_room, 50, 0, busy, buckets(50, 20), None, 50, now=at)
    assert (rate, reason) == (21, "hold: near where the app last overloaded, and busy")
    while rate == 21:
        at += 1000
        rate, _ = await store.report(the_room, 50, 0, fast, buckets(50, 20), None, 50, now=at)
    assert rate == 22


async def eased(store: Store) -> tuple[Room, int]:
    """A room at 20 a second (its ceiling) whose latency crept up near the
    target: eased to 19. The room, and the moment of the ease."""
    target = Health(p95_ms=300, floor=2, ceiling=20)  # settle: 10 s
    the_room = room(rate=20, target=target)
    await fill_line(store, the_room)
    at = T0
    for p95 in (50, 50, 50, 250):  # the base, then near the target and rising
        at += 1000
        latency = buckets(50, p95)
        rate, reason = await store.report(the_room, 50, 0, latency, buckets(50, 20), None, 50, now=at)
    assert (rate, reason) == (19, "ease: near the target, a queue growing")
    return the_room, at


async def test_a_queue_forming_after_an_ease_waits_for_it_to_show(store: Store) -> None:
    """After an ease (or a cut), the requests of the visitors admitted
    before it still come for a round trip: a queue forming then is the one
    it was made for. The rule that drains a queue forming waits the round
    trip, as a second cut does (a third of one after a raise): a creeping
    latency's one-visitor decrease followed by a drain two seconds later
    took 17 -> 16 -> 12 in the simulated benchmark."""
    the_room, eased_at = await eased(store)
    at, rates = eased_at, []
    while at < eased_at + 12_000:  # completing 80 of 100, the p95 past halfway to the headroom
        at += 1000
        rate, _ = await store.report(the_room, 80, 0, buckets(80, 200), buckets(80, 20), None, 100, now=at)
        rates.append(rate)
    assert rates[:9] == [19] * 9, rates  # the round trip after the ease
    assert rates[-1] < 19, rates  # then the queue still forming is drained


async def test_an_ease_does_not_hold_back_a_cut_when_the_target_is_crossed(store: Store) -> None:
    """One visitor less near the target (Vegas's decrease) eases a queue
    growing slowly; it is not a cut. When the app then crosses the target
    (its capacity fell), the whole cut comes at the next look, as TCP's cut
    on a loss comes whatever Vegas did before. Counted as a cut, the ease
    made a crossing right after it wait (a hold), then get only the drain
    to what the app completes: in a run of the real benchmark whose pool
    fell to a third as the room eased, 10 -> 8 instead of 6."""
    the_room, at = await eased(store)
    at += 1000
    slow = buckets(50, 700)
    rate, reason = await store.report(the_room, 50, 0, slow, buckets(50, 20), None, 50, now=at)
    assert rate <= 19 * 0.7, (rate, reason)
    assert reason.startswith("cut: p95"), reason


async def test_no_signal_no_change(store: Store) -> None:
    the_room = room(rate=7)
    await fill_line(store, the_room)
    for second in range(60):  # a trickle: fewer responses than it takes to judge
        await store.report(
            the_room, 0 if second % 10 else 1, 0, buckets(1, 10), buckets(1, 10), now=T0 + second * 1000
        )
    stats = await store.stats(the_room, now=T0 + 60_000)
    assert stats["rate"] == 7
    assert stats["health_reason"] == "hold: too few responses to judge"


async def test_a_room_at_its_floor_gathers_evidence_and_climbs_again(store: Store) -> None:
    """At a floor of one a second, with a request per visitor, a second has
    one response: too few to judge in windows of a second or two, so the
    rate stayed at the floor after the app recovered. A window now lasts
    until it holds enough responses (10 s at most)."""
    the_room = room(rate=1, target=Health(p95_ms=300, floor=1, ceiling=200))
    await fill_line(store, the_room)
    rates = []
    for second in range(30):
        now = T0 + second * 1000
        rate = (await store.stats(the_room, now=now))["rate"]
        rates.append(rate)
        await store.report(the_room, rate, 0, buckets(rate, 20), buckets(rate, 10), None, rate, now=now)
    assert max(rates[:15]) >= 2, rates  # judged within seconds, not stuck
    assert rates[-1] >= 8, rates


async def test_nobody_waiting_no_raise(store: Store) -> None:
    the_room = room(rate=7)
    trace = await run(store, the_room, Plant(capacity=1000), 30, 0)
    assert {rate for rate, _ in trace} == {7}
    assert (await store.stats(the_room, now=T0 + 30_000))["health_reason"] == "hold: healthy, nobody waiting"


async def test_bounds_hold(store: Store) -> None:
    the_room = room(rate=10, target=Health(p95_ms=300, floor=6, ceiling=12))
    await fill_line(store, the_room)
    plant = Plant(capacity=10_000)
    assert max(rate for rate, _ in await run(store, the_room, plant, 40, 0)) == 12
    plant.capacity = 5  # hopeless: the floor still lets the line move
    assert min(rate for rate, _ in await run(store, the_room, plant, 60, 40)) == 6
    stats = await store.stats(the_room, now=T0 + 100_000)
    # Held there, and said so: no "cut" that changes nothing.
    assert stats["health_reason"].endswith("over the 300 ms target, at the floor"), stats
    assert stats["health_changed"].startswith("cut: ")


async def test_the_operator_pins_and_releases(store: Store) -> None:
    the_room = room(rate=10)
    await fill_line(store, the_room)
    plant = Plant(capacity=1000)
    await store.stats(the_room, now=T0)
    await store.configure(the_room, rate=8, now=T0)
    trace = await run(store, the_room, plant, 30, 0)
    assert {rate for rate, _ in trace} == {8}
    stats = await store.stats(the_room, now=T0 + 30_000)
    assert stats["pinned"] == 1
    assert stats["health_reason"] == "hold: pinned by the operator"
    await store.configure(the_room, pinned=None, now=T0 + 30_000)
    trace = await run(store, the_room, plant, 20, 30)
    assert trace[-1][0] > 8


async def test_paused_and_closed_rooms_hold(store: Store) -> None:
    the_room = room(rate=10, status="paused")
    await fill_line(store, the_room)
    trace = await run(store, the_room, Plant(capacity=1), 30, 0)
    assert {rate for rate, _ in trace} == {10}


async def test_several_processes_agree_and_one_stopping_freezes_nothing(redis_url: str) -> None:
    prefix = f"qgm{time.time_ns()}"
    stores = [Store(connect(redis_url, 5.0), prefix=prefix) for _ in range(3)]
    try:
        the_room = room(rate=5)
        await fill_line(stores[0], the_room)
        # Each of 3 processes sees a third of the traffic; the plant is shared.
        plant = Plant(capacity=100)
        rates = []
        for second in range(90):
            now = T0 + second * 1000
            seen = {(await s.stats(the_room, now=now))["rate"] for s in stores}
            assert len(seen) == 1  # one rate, whichever process asks
            rate = seen.pop()
            rates.append(rate)
            if second == 50:
                plant.capacity = 40  # after two processes died: the survivor alone must act
            load, _, p95 = plant.second(rate)
            alive = stores if second < 45 else stores[:1]  # two processes die halfway
            for s in alive:
                share = load // len(alive)
                await s.report(the_room, share, 0, buckets(share, p95), buckets(share, p95), now=now)
        assert rates[44] > 10  # raised while all three reported
        assert rates[-1] < 10  # cut on the survivor's reports alone
    finally:
        for s in stores:
            await s.aclose()


def test_end_to_end_a_slower_endpoint_slows_admissions(redis_url: str) -> None:
    """A real server; the endpoint goes from 5 ms to 400 ms per request, and
    the room's rate comes down within the controller's stated bound."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    delay = {"s": 0.005}

    async def page(request: object) -> PlainTextResponse:
        await asyncio.sleep(delay["s"])
        return PlainTextResponse("ok")

    the_room = Room(
        "slow", paths=["/buy"], rate=40, per=1.0, client_limit=0, target=Health(p95_ms=100, floor=2)
    )
    app = QueueGate(
        Starlette(routes=[Route("/buy", page)]),
        rooms=[the_room],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
    )

    async def traffic(base: str, seconds: float) -> list[int]:
        rates = []
        store = Store(connect(redis_url, 5.0))
        try:
            async with httpx.AsyncClient(base_url=base, timeout=10) as one:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    # New visitors keep coming (so someone waits) while the
                    # admitted ones make requests.
                    visitors = [httpx.AsyncClient(base_url=base, timeout=10) for _ in range(8)]
                    await asyncio.gather(*(v.get("/buy") for v in visitors))
                    await asyncio.gather(*(v.get("/buy") for v in visitors if "qg_slow" in v.cookies))
                    await asyncio.gather(*(v.aclose() for v in visitors))
                    await one.get("/buy")
                    rates.append((await store.stats("slow"))["rate"])
        finally:
            await store.aclose()
        return rates

    with served(app) as base:
        before = asyncio.run(traffic(base, 6))
        delay["s"] = 0.4
        started = time.monotonic()
        after = asyncio.run(traffic(base, 20))
        took = time.monotonic() - started
    assert before[-1] >= 40
    assert min(after) < 40, after  # cut within 20 s (a look a second, on the last 1-2 s)
    assert took < 40


async def test_routes_gated_by_a_fastapi_dependency_are_measured(redis_url: str) -> None:
    from fastapi import Depends, FastAPI

    from queuegate.integrations.fastapi import queue

    from .conftest import client_for

    api = FastAPI()

    @api.get("/buy", dependencies=[Depends(queue("shop"))])
    async def buy() -> dict[str, str]:
        return {"ok": "yes"}

    @api.get("/other")
    async def other() -> dict[str, str]:
        return {"ok": "yes"}

    shop = Room("shop", rate=100, per=1.0, target=Health(p95_ms=100))
    gate = QueueGate(api, rooms=[shop], secret_key=SECRET, redis=redis_url, environ={})
    try:
        async with client_for(gate) as client:
            assert (await client.get("/buy")).status_code == 200
            assert (await client.get("/other")).status_code == 200
        tallies = gate.health._tallies
        assert list(tallies) == [shop]
        assert tallies[shop].responses == 1  # /buy, not /other
        assert tallies[shop].started == 1  # counted as started too, for what the app keeps up with
    finally:
        await gate.aclose()
