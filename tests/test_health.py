"""The admission controller (health.lua) against a simulated plant: a backend
of known capacity whose latency climbs as its load nears it, fed by the
visitors the controller admits, each making requests for a while after
admission. Time is simulated (every call passes ``now``), the reports are
computed, the rule runs in real Redis: fast and deterministic."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import queuegate
from benchmarks.adaptive_report import p95_per_second
from benchmarks.families import oracle, simulate, visit_seconds
from benchmarks.plants import Plant as SimPlant
from benchmarks.plants import Stalling, capacity_rate, make_plant
from queuegate import Health, QueueGate, Room
from queuegate.health import BOUNDS_MS
from queuegate.store import Store, connect
from queuegate.target import VERDICTS, verdict

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


async def looks(
    store: Store,
    the_room: Room,
    seconds: int,
    load: Callable[[int, int], tuple[int, int, float]],
    visits: Callable[[int, int], list[float]] | None = None,
    start: int = 0,
) -> tuple[list[int], list[str]]:
    """Simulated seconds from ``start``: each second the room's rate and
    last decision, then the report ``load(second, rate)`` makes:
    (responses, errors among them, their time in ms), as many requests
    started as responses, and the visits' figures by age
    ``visits(second, rate)`` if given."""
    rates, reasons = [], []
    for second in range(start, start + seconds):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        rates.append(stats["rate"])
        reasons.append(stats["health_reason"])
        count, errors, ms = load(second, rates[-1])
        by_age = visits(second, rates[-1]) if visits is not None else None
        await store.report(
            the_room,
            count,
            errors,
            buckets(count, ms),
            buckets(count, ms / 2),
            None,
            count,
            visits=by_age,
            now=now,
        )
    return rates, reasons


async def fill_line(store: Store, the_room: Room, n: int = 20_000) -> None:
    """People waiting (the controller only raises the value while some do)."""
    await store.stats(the_room, now=T0)
    keys = store.keys(the_room.name)
    members = {f"v{i}": i for i in range(n)}
    await store.client.zadd(keys[1], members)
    await store.client.zadd(keys[2], {m: T0 for m in members})


# The law over the families of backends (benchmarks.plants), on simulated
# clocks: the safety rules hold whatever the plant's parameters.
SHORT_PHASE = 40  # seconds a phase, in these runs


def most_rate(plant: SimPlant) -> float:
    """The most visitors a second the plant's bottleneck serves, in its
    biggest phase: twice this is a runaway."""
    return max(capacity_rate(plant, share) for share in plant.phases)


def drawn_plants(families: list[str], examples: int) -> Callable[[Any], Any]:
    """Hypothesis over ``families`` and their seeds, derandomized: the same
    plants on every run (a young room's known limit, below, made a random
    draw fail now and then)."""

    def decorate(test: Any) -> Any:
        test = given(family=st.sampled_from(families), seed=st.integers(0, 10**6))(test)
        return settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )(test)

    return decorate


@drawn_plants(["pool", "processor", "delayed", "delayed_unseen_pages", "shedding"], 6)
async def test_no_runaway_and_no_raise_without_headroom(redis_url: str, family: str, seed: int) -> None:
    """Whatever the plant: the rate never goes past twice what the plant can
    serve (the heavy request tens of seconds after admission included), and
    the controller raises only at a look that found the app within target."""
    await no_runaway_and_no_raise_without_headroom(redis_url, family, seed)


async def no_runaway_and_no_raise_without_headroom(redis_url: str, family: str, seed: int) -> None:
    run = await simulate(redis_url, family, seed, SHORT_PHASE)
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, (family, seed, max(run.rates))
    for second in range(1, len(run.rates)):
        # Each second's rate and reason are those of the look just before it.
        p95, reason = run.reasons[second].split(" ", 1)
        if run.rates[second] > run.rates[second - 1] and not reason.startswith("target out of reach"):
            assert float(p95) <= run.target_ms, (second, run.rates[second - 1 : second + 1], reason)


@drawn_plants(["hang", "outage", "outage_silent", "autoscale", "cold_start"], 4)
async def test_no_runaway_on_hangs_outages_autoscaling_and_cold_starts(
    redis_url: str, family: str, seed: int
) -> None:
    """The same rules on the shapes added later: a queue held until a
    proxy's timeout, an outage, capacity that an autoscaler adds, cold
    caches at the start."""
    await no_runaway_and_no_raise_without_headroom(redis_url, family, seed)


@pytest.mark.parametrize(("family", "seed"), [("pool", 0), ("pool", 3), ("processor", 1)])
async def test_a_rate_a_minute_follows_health_as_a_rate_a_second_does(
    redis_url: str, family: str, seed: int
) -> None:
    """A room's rate is per minute unless told otherwise (``per=60``). With
    a target, its 300 a minute came as 300 at once at each minute's start:
    the first look read that burst as an overload, cut to a floor of one a
    minute, and saw nothing more for a minute; the burst's queue was then
    named a target out of reach and the rate let 8x the plant's capacity
    in. Now it admits evenly (a second's share of N at a time) and its
    floor is a visitor a second: no second lets in a burst, the rate stays
    within twice what the plant serves, and it sells about as much as the
    same room counting a second."""
    by_minute = await simulate(redis_url, family, seed, 120, per=60)
    by_second = await simulate(redis_url, family, seed, 120)
    most = most_rate(by_minute.plant)
    for second, let_in in enumerate(by_minute.admitted):
        rate = max(by_minute.rates[max(0, second - 1) : second + 1])
        assert let_in <= rate + 1, (second, let_in, rate)
    assert max(by_minute.rates) <= 2 * most + 1, max(by_minute.rates)
    sold, sold_by_second = len(by_minute.plant.purchases), len(by_second.plant.purchases)
    assert sold >= 0.8 * sold_by_second, (sold, sold_by_second)


@pytest.mark.parametrize(("seed", "named"), [(12, False), (22, True), (40, True)])
async def test_the_tail_of_a_fall_read_as_a_target_out_of_reach_does_not_flood_the_app(
    redis_url: str, seed: int, named: bool
) -> None:
    """A backend whose requests turn dearer (an auditor's held-out
    ``mix_shift``) falls to half its capacity; cut to the floor, the room
    read the tail of the queue the fall built as the app's own pace (seed
    12: 905 ms at minimal load, where the app answered in 20 ms by then)
    and named the target out of reach. It then went back at once to its
    rate from before the fall, 29 a second into an app now serving 12, and
    its probes doubled the old capacity. A target named out of reach starts
    the law again from what the app does at minimal load: no second of
    the fallen phase goes past twice its best fixed rate. (Seeds whose
    rate before the fall is over twice the fallen phase's best, and that
    name the target out of reach: 22 a second against 9, 75 against 32.
    Seed 12, the first, names none since pauses restart no minute,
    2026-11-28: its fall is still held within twice the best.)"""
    run = await simulate(redis_url, "mix_shift", seed, 120)
    if named:
        assert any("target out of reach" in why for why in run.reasons[120:240]), run.reasons[120:240]
    best = oracle("mix_shift", seed, 1, 120)["rate"]
    assert max(run.rates[125:240]) <= 2 * best, (max(run.rates[125:240]), best)


@pytest.mark.xfail(
    strict=True,
    reason="congestion collapse reads as a small capacity: a known limit (docs/guides/health-law.md)",
)
async def test_a_probe_into_congestion_collapse_comes_back_to_what_the_app_served(redis_url: str) -> None:
    """An app past its knee completes less the more it holds (lock
    contention, thrashing: the held-out ``collapse`` family, seed 1). A
    raise from 10 to 12 a second overloads it; the collapse's reading (a
    fraction of what it completed at 10) becomes the capacity, and the
    room holds 3 a second for a minute where 9 is the best fixed rate.
    What a law that knew a failed probe from a fall would do: once within
    target again, hold near the best fixed rate while it waits to probe.
    (Three ways of telling them apart were tried on 2026-11-28 and not
    kept: each flooded, or cost, other families; docs/measurements.md.)"""
    run = await simulate(redis_url, "collapse", 1, 120)
    cut = next(i for i, why in enumerate(run.reasons) if "cut:" in why)
    back = next(i for i in range(cut, 120) if "within target" in run.reasons[i])
    best = oracle("collapse", 1, 0, 120)["rate"]
    held = statistics.median(run.rates[back + 5 : back + 50])
    assert held >= 0.7 * best, (held, best, run.reasons[cut : back + 50])


async def test_a_floor_left_to_its_default_follows_the_per_an_operator_sets(redis_url: str) -> None:
    """A floor left to its default is a visitor a second in the room's
    units: 60 for a rate per minute. It was fixed from the code's ``per``,
    so once an operator set ``--rate 5 --per 1`` and gave the rate back to
    the controller (``--auto``), the floor read 60 a second: the room held
    60 a second into a pool that serves 23 at most, most of it failing, and
    named the target out of reach. Made from the ``per`` in force, the rate stays
    within twice what the pool serves after the release, as before it."""
    run = await simulate(
        redis_url, "pool", 3, 60, per=60, changes={30: {"rate": 5, "per": 1.0}, 60: {"pinned": None}}
    )
    most = most_rate(run.plant)
    assert run.rates[31:60] == [5] * 29, run.rates[31:60]
    assert max(run.rates[61:]) <= 2 * most + 1, (max(run.rates[61:]), most, run.reasons[61:70])
    assert min(run.rates[61:]) < 60, run.reasons[61:70]


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # a failing draw as drawn: a shrink takes many minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    family=st.sampled_from(["pool", "processor", "delayed", "shedding", "unreachable", "heavy_tail"]),
    seed=st.integers(0, 10**6),
    floor=st.integers(1, 6),
    span=st.integers(0, 40),
    pin=st.integers(1, 60),
    pinned_at=st.integers(5, 80),
)
async def test_the_bounds_and_the_pin_win_and_the_floor_moves_the_line(
    redis_url: str, family: str, seed: int, floor: int, span: int, pin: int, pinned_at: int
) -> None:
    """Whatever the plant and its moment: the rate stays within the room's
    bounds; while the operator pins it, it is the pin, and the controller
    takes it back from there when released; and the line moves at the
    floor's pace at least, every second (a room over its target, or with
    its target out of reach, never stops it)."""
    ceiling = floor + span
    released = pinned_at + 20
    run = await simulate(
        redis_url,
        family,
        seed,
        SHORT_PHASE,
        floor=floor,
        ceiling=ceiling,
        pins={pinned_at: pin, released: None},
    )
    # (The room's rate from code until its first look, the pin until the
    # look after its release.)
    first_look = next(i for i, why in enumerate(run.reasons) if why.split(" ", 1)[1])
    for second, (rate, let_in) in enumerate(zip(run.rates, run.admitted, strict=True)):
        moment = (family, seed, second, run.reasons[second])
        if pinned_at <= second < released:
            assert rate == pin, moment
        elif second > first_look and second != released:
            assert floor <= rate <= ceiling, moment
        if second:  # (the first look admits the room's rate from code at once)
            assert let_in >= min(rate, floor), moment
    assert any("pinned by the operator" in why for why in run.reasons[pinned_at + 1 : released]), run.reasons


@pytest.mark.xfail(strict=True, reason="a young room cannot know of a heavy request later than its own age")
async def test_a_young_room_runs_past_twice_the_capacity_before_a_heavy_request(redis_url: str) -> None:
    """The known limit: a room 55 s old whose visitors make their heavy
    request 55 s or more after admission has seen only light pages, within
    target; the bound (twice what it admitted over three visits' lengths)
    lets it double every 18 s or so, to 97 a second where the plant serves
    39 at most. Draws like this one made the property above fail now and
    then (2 in 100 draws of the heavy-request family); this test says so
    until the law knows better (strict: it fails once the rate stays
    within twice the capacity)."""
    run = await simulate(redis_url, "delayed", 303677, SHORT_PHASE)
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)


async def test_a_young_room_told_its_visits_length_stays_within_twice_the_capacity(redis_url: str) -> None:
    """The remedy the guide gives for the limit above: an operator who knows
    the visit's heavy request comes late sets ``settle`` to the visit's
    length. The same draw then stays within twice what the plant serves
    (15 a second at most, against 97 with the benchmark's settle of 6 s),
    and still climbs from its rate from code."""
    plant, _, _ = make_plant("delayed", 303677, SHORT_PHASE)
    visit = visit_seconds(plant)  # 59.5 s: light pages, then the heavy request
    run = await simulate(redis_url, "delayed", 303677, SHORT_PHASE, settle=round(visit))
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)
    assert max(run.rates) > run.rates[0], run.reasons


async def test_a_long_visits_probes_are_paced_in_settles(redis_url: str) -> None:
    """Visits ten settles long (light pages, then the heavy request 40-50 s
    after admission): each probe waits a visit for its load to show. Where
    the capacity grows again after a fall (the third phase, 4x the
    second's), the probes' ramp (1/8, 1/4, 1/2, x2) goes a step for each
    settle their change took to show, and the cruise after a cut is one
    settle once it has shown: the probe after the step at the last overload
    doubles, and the rate at least doubles in the phase. (Before, 1/8 then
    1/4, a visit apart, the first two visits after the cut: 12 a second to
    24 in the phase, against a best fixed rate of 66.) The rate still stays
    within twice what the plant serves."""
    run = await simulate(redis_url, "delayed", 13, 120)
    start, end = 240, 359  # the third phase
    probes = [why for why in run.reasons[start : end + 1] if "visitors waiting (capacity x" in why]
    assert any("capacity x2.00" in why for why in probes), probes
    assert run.rates[end] >= 2 * run.rates[start], (run.rates[start], run.rates[end], probes)
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)


async def test_after_a_cut_the_model_raises_again_once_a_settle_has_shown_it(redis_url: str) -> None:
    """Visits 62 s long, their light pages unseen (the heavy request 52-69 s
    after admission): a probe past the fallen capacity (11 a second) is cut
    to the floor 18 s before the capacity grows 4x (the third phase). Two
    seconds after the cut the app is within target and the model allows
    10 a second (the visitors inside bring less than the capacity), but a
    lowering held the model's raise for a visit (read as 88 s): the floor
    until 311 s, 71 s into the grown phase. The model counts the load the
    visitors inside will still bring; what the cut needs to show is its
    queue gone, a settle: back over the floor within two settles of the
    cut, and the third phase starts there. The rate stays within twice what
    the plant serves."""
    run = await simulate(redis_url, "delayed_unseen_pages", 4, 120)
    start = 240  # the third phase
    cut = max(i for i in range(start - 60, start) if run.reasons[i].split(" ", 1)[1].startswith("cut:"))
    back = next(i for i in range(cut, len(run.rates)) if run.rates[i] > run.rates[cut])
    assert back - cut <= 2 * 6, (cut, back, run.rates[cut : back + 1])
    assert "what the visitors inside will bring leaves room" in run.reasons[back], run.reasons[back]
    assert run.rates[start] > 1, run.rates[cut:start]
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)


async def test_a_grown_capacity_is_climbed_by_doubling_while_the_p95_shows_no_queue(redis_url: str) -> None:
    """A pool whose capacity grows 5.8x (the third phase: 23 a second at
    best, against 4 before): a probe past the last overload holds, and the
    p95 is still where it is at minimal load (no queue, no knee near), so
    the next probe doubles instead of taking the ramp's next step (before:
    1/8, 1/8, 1/4, 1/2, x2, a settle apart, 4 to 22 a second in 24 s);
    the rate reaches 20 a second within 15 s of the first probe past it.
    Where the p95 shows a queue after such a probe (the first phase of
    seed 7: an overload read a little low, the app at 0.9 of its
    capacity, its p95 1.3x the least seen), the ramp goes on (1/8, then
    1/4: 16 a second to 18, then 22)."""
    run = await simulate(redis_url, "pool", 3, 120)
    start, end = 240, 359  # the third phase
    probes = [i for i in range(start, end + 1) if "visitors waiting (capacity x" in run.reasons[i]]
    assert "capacity x1.12" in run.reasons[probes[0]], run.reasons[start : end + 1]
    assert "capacity x2.00" in run.reasons[probes[1]], run.reasons[start : end + 1]
    reached = next(i for i in range(start, end + 1) if run.rates[i] >= 20)
    assert reached - probes[0] <= 15, (probes[0], reached, run.rates[start : end + 1])
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)
    queued = await simulate(redis_url, "pool", 7, 120)
    past = [i for i in range(120) if "within target, at the last overload" in queued.reasons[i]]
    after = [why for why in queued.reasons[past[0] : 120] if "visitors waiting (capacity x" in why]
    assert len(after) >= 2, after
    assert not any("capacity x2.00" in why for why in after[:2]), after


async def test_an_overload_past_a_capacity_only_guessed_is_cut(redis_url: str) -> None:
    """A probe's capacity is a guess, not a limit; the app then overloads
    (load the gate does not see, on the same pool). The overload beyond
    chance sets the limit and cuts at once: it does not hold the rate
    "while the last cut shows" when there was no cut (a room held at 10 a
    second with a p95 of 2.4 s for six minutes)."""
    run = await simulate(redis_url, "background", 0, SHORT_PHASE)
    p95s = [float(reason.split(" ", 1)[0]) for reason in run.reasons]
    first_over = next(i for i, p95 in enumerate(p95s) if p95 > run.target_ms)
    assert min(run.rates[first_over : first_over + 5]) < run.rates[first_over - 1], run.reasons[:20]
    stretch = longest = 0
    for p95 in p95s:
        stretch = stretch + 1 if p95 > run.target_ms else 0
        longest = max(longest, stretch)
    assert longest <= 15, run.reasons


async def test_noise_never_walks_the_rate_down(redis_url: str) -> None:
    """A heavy tail at any load (median 50 ms, p99 about 1 s, target 600
    ms): some seconds' p95 cross the target by chance; no cut follows."""
    for seed in range(2):
        run = await simulate(redis_url, "heavy_tail", seed, SHORT_PHASE)
        cuts = [reason for reason in run.reasons if " cut: " in reason]
        assert not cuts, cuts
        assert run.rates[-1] > run.rates[0]


async def test_a_target_out_of_reach_is_named_and_the_line_still_moves(redis_url: str) -> None:
    """Slow at any load: within 30 s the room says so, and instead of
    holding the floor it climbs again against 1.5x the p95 at minimal load,
    as the app shows room: at its rate from code within 30 s of the name,
    never lowered after it (an app no slower at any load). (It went back at
    once to its rate from code, or to the last rate within target, which
    after a fall was the rate from before it: see the test below.)"""
    run = await simulate(redis_url, "unreachable", 0, SHORT_PHASE)
    named = next(
        i for i, reason in enumerate(run.reasons) if "target out of reach: p95 at minimal load" in reason
    )
    assert named <= 30, run.reasons[:40]
    after = run.rates[named:]
    assert all(later >= earlier for earlier, later in itertools.pairwise(after)), after
    reached = next(i for i, rate in enumerate(after) if rate >= 5)  # START_RATE: the rate from code
    assert reached <= 30, after


@pytest.mark.parametrize("seed", [0, 3])
async def test_a_pause_is_not_taken_for_the_apps_size(redis_url: str, seed: int) -> None:
    """An app whose work stops for 0.4-1.5 s every 15-45 s at any load (a
    collector's pause, a checkpoint): each pause is over the target beyond
    chance, and the cut reads the little the app completed in it. Within
    target again before the cut has shown (the visitors inside still
    coming), it was a pause, not a fall: the room is back at its rate
    before it within a few seconds of each pause, after the first minute.
    (Before, each pause's reading became the capacity and the last
    overload, and the rate walked down: seed 0 from 8 to 1 a second,
    against a best fixed rate of 18.)"""
    run = await simulate(redis_url, "stalls", seed, 120)
    app = run.plant.servers["app"]
    assert isinstance(app, Stalling)
    checked = 0
    begins = app.offset
    while begins + app.pause + 11 < len(run.rates):
        if begins >= 60:
            before = run.rates[int(begins) - 1]
            ends = int(begins + app.pause)
            back = run.rates[ends : ends + 10]
            assert max(back) >= 0.8 * before, (begins, before, back)
            checked += 1
        begins += app.every
    assert checked >= 5


@pytest.mark.parametrize("seed", [0, 3])
async def test_back_from_a_pause_at_the_rate_before_it_not_by_a_climb(redis_url: str, seed: int) -> None:
    """Each pause still cuts (over the target beyond chance: it cannot be
    told from an overload while it lasts), but once the app is within
    target again before the cut has shown, the room goes back at once to
    the rate of its last look within target before the pause, which the
    app served: the ten seconds after a pause average 0.62-0.64 of the rate
    before it (median over the pauses after the first minute). Before, the
    model climbed back from the floor over half a minute (0.42-0.43), and a
    pause every 15-45 s held the room at 0.70 of the best fixed rate."""
    run = await simulate(redis_url, "stalls", seed, 120)
    app = run.plant.servers["app"]
    assert isinstance(app, Stalling)
    shares = []
    begins = app.offset
    while begins + app.pause + 11 < len(run.rates):
        if begins >= 60:
            before = run.rates[int(begins) - 1]
            ends = int(begins + app.pause)
            shares.append(statistics.mean(run.rates[ends : ends + 10]) / before)
        begins += app.every
    assert len(shares) >= 5
    assert statistics.median(shares) >= 0.55, shares
    assert any("back to the rate before it" in reason for reason in run.reasons)


async def test_a_pause_that_began_in_the_last_look_within_target_is_a_pause(redis_url: str) -> None:
    """A pause is told from a fall by what the app completed at the cut
    against what it completed within target before. Where a pause began
    late in a look that was still within target (seed 7: a pause every
    16 s), that look completed less already, the cut's reading was not far
    under it, and the pause was read as a fall: the room stayed at the
    floor until the cut had shown (6-7 s), and its probes waited a minute
    from the cut (the room held 6 a second for two minutes). Where the
    rate was not raised while its load was still coming, the cut's reading
    is held against the last two looks within target: after the first
    minute, the room is back at its rate before each pause (but one just
    after a raise) within 4 s of the pause's end."""
    run = await simulate(redis_url, "stalls", 7, 120)
    app = run.plant.servers["app"]
    assert isinstance(app, Stalling)
    late = []
    begins = app.offset
    while begins + app.pause + 5 < len(run.rates):
        # (Not one within a settle of a raise: its load still coming, a
        # pause then cannot be told from the raise's overload.)
        raised = any(" raise:" in why for why in run.reasons[max(0, int(begins) - 6) : int(begins) + 1])
        if begins >= 60 and not raised:
            before = run.rates[int(begins) - 1]
            ends = int(begins + app.pause)
            # (The look after the pause's end reads it: rates from there.)
            if max(run.rates[ends + 1 : ends + 5]) < before:
                late.append((round(begins), before, run.rates[int(begins) : ends + 8]))
        begins += app.every
    assert not late, late
    assert max(run.rates) <= 2 * most_rate(run.plant) + 1, max(run.rates)


@pytest.mark.parametrize("seed", [0, 4])
async def test_pauses_do_not_keep_the_room_from_probing(redis_url: str, seed: int) -> None:
    """A pause's cut is no evidence of where the app overloads: once it is
    told for a pause, the minute that probes past the last overload wait
    runs from the cut before it. After the first minute the room probes at
    least every 100 s (a minute, the change showing and a pause's episode).
    (Before, each pause's cut restarted the minute: with a pause every
    15-45 s the room never probed, and held at an overload read in a pause
    for 177-300 s; seed 4 at 0.33 and 0.30 of the best fixed rate in its
    last two phases.)"""
    run = await simulate(redis_url, "stalls", seed, 120)
    probes = [i for i, reason in enumerate(run.reasons) if i >= 60 and "visitors waiting (capacity" in reason]
    gaps = [later - earlier for earlier, later in itertools.pairwise([60, *probes, len(run.reasons)])]
    assert max(gaps) <= 100, [(i, reason) for i, reason in enumerate(run.reasons) if " raise:" in reason]


async def test_a_probe_cut_soon_after_is_no_pause(redis_url: str) -> None:
    """A shared CPU completes less for a second or two under a probe's
    load: that cut is no pause, and the room does not go back to the
    probe's rate (seed 0: a probe to 46 a second, cut at 102 s, within
    target 5 s later; taken for a pause, the rate went back to 46 and the
    app overloaded again 4 s later)."""
    run = await simulate(redis_url, "processor", 0, 120)
    assert not any("after a pause" in reason for reason in run.reasons), [
        (i, r) for i, r in enumerate(run.reasons) if "after a pause" in r
    ]


async def test_the_queue_a_fall_leaves_is_drained_at_once(redis_url: str) -> None:
    """A shared CPU (latency climbing smoothly with load) whose capacity
    falls to 32 % at 120 s, with the room at 30 a second: the requests in
    flight are a queue of seconds of work. The cut drains it (admitting
    at the floor while the app holds more work in flight than it serves
    within the target at the pace it completes) and the rate comes back
    as soon as it is gone: the p95 is within the target again within 10
    s of the fall. (Before, the cut went to the model's 8 a second, a
    rate the app could serve but only 0.1 s of work a second under its
    capacity: the queue took 18 s to drain, every one of them over the
    target.)"""
    run = await simulate(redis_url, "processor", 0, 120)
    p95s = p95_per_second(run.plant.served, 120, 150, empty=0.0)
    over = [120 + i for i, p95 in enumerate(p95s) if p95 > run.target_ms]
    assert len(over) <= 10, over
    assert max(over) < 130, over
    # Back at once: the rate the capacity allows within 10 s of the drain.
    assert max(run.rates[125:140]) >= 8, run.rates[120:140]


@pytest.mark.parametrize(("family", "seed"), [("pool", 1), ("processor", 9), ("hang", 3)])
async def test_probes_past_a_fall_wait_a_minute_from_it(redis_url: str, family: str, seed: int) -> None:
    """Capacity falls to 30-50 % at 120 s and stays there. The fall's
    overload is where the app overloads now: no probe past it for a
    minute from its cut, as after a room's first overload. (Before, the
    clock ran from the probes of the phase before: 25-31 s after the fall
    a probe past it overloaded the app again, 4-7 s over the target, and
    a second came a minute later; 14-25 s of the 120 over the target.)"""
    run = await simulate(redis_url, family, seed, 120)
    cut = next(s for s in range(120, 240) if run.reasons[s].split(" ", 1)[1].startswith("cut:"))
    probes = [s for s in range(cut, 240) if "capacity x" in run.reasons[s]]
    assert probes, run.reasons[cut:240]
    assert probes[0] - cut >= 60, (cut, probes, run.rates[cut:240])
    p95s = p95_per_second(run.plant.served, 120, 240, empty=None)
    assert sum(p95 > run.target_ms for p95 in p95s) <= 0.125 * len(p95s), (cut, probes)


@pytest.mark.parametrize(
    ("family", "seed"), [("outage", 1), ("outage", 3), ("outage_silent", 1), ("outage_silent", 3)]
)
async def test_an_outage_is_not_taken_for_the_apps_size(redis_url: str, family: str, seed: int) -> None:
    """The app down for 10-40 s, every request failing fast or none
    answered until a proxy's timeout, then back at full capacity: down, not
    overloaded. The line moves at the floor meanwhile, the target is not
    named out of reach (requests held in flight are no p95 at minimal
    load), and once the app answers again the room is back at about its
    rate before the outage within a few seconds, not probing up from the
    floor a minute later."""
    run = await simulate(redis_url, family, seed, 120)
    start, end = run.plant.down[0]
    before = run.rates[int(start) - 1]
    answered = int(end + run.plant.down_hang_s)  # the last request held in it has failed
    assert min(run.rates[int(start) : answered]) >= 1
    assert not any("out of reach" in reason for reason in run.reasons), run.reasons[int(start) : answered]
    back = run.rates[answered : answered + 10]
    assert max(back) >= 0.8 * before, (before, back)
    assert max(back) <= before + 1, (before, back)  # no more than the evidence before it


async def test_a_down_mark_goes_with_its_outage(redis_url: str) -> None:
    """A room at its floor when the app goes down (no cut before it), then
    the app back: the mark goes with the outage. A later, ordinary
    overload's first look within target then keeps what that overload
    taught (the mark left behind set back what the room knew before it:
    a capacity of thousands, and the app overloaded again 16 s later
    where the same room without the outage waited 65 s)."""

    async def cuts(outage: bool) -> tuple[list[int], object]:
        store = Store(connect(redis_url, 5.0), prefix=f"qgd{time.time_ns()}")
        the_room = room(rate=2, target=Health(p95_ms=300, max_error_rate=0.02, floor=2, settle=5))
        try:

            def before(second: int, rate: int) -> tuple[int, int, float]:
                down = outage and 20 <= second < 35
                return 3 * rate, 3 * rate if down else 0, 5.0 if down else 100.0

            await looks(store, the_room, 55, before)
            health = store.keys(the_room.name)[4][: -len("state")] + "health"
            left = await store.client.hget(health, "down")
            keys = store.keys(the_room.name)
            members = {f"v{i}": i for i in range(20_000)}
            await store.client.zadd(keys[1], members)
            await store.client.zadd(keys[2], {m: T0 + 55_000 for m in members})

            def later(second: int, rate: int) -> tuple[int, int, float]:
                return 3 * rate, 0, 100.0 if rate < 12 else 2000.0

            _, reasons = await looks(store, the_room, 150, later, start=55)
            return [second for second, why in enumerate(reasons) if why.startswith("cut: ")], left
        finally:
            await store.aclose()

    with_outage, left = await cuts(True)
    without, _ = await cuts(False)
    assert left is None
    assert len(without) >= 2, without  # the scenario overloads more than once
    assert with_outage[:2] == without[:2], (with_outage, without)


async def test_the_visitors_inside_hold_the_rate_down_until_their_load_has_come(redis_url: str) -> None:
    """An admission counts at once as the load it will bring: after an
    overload, while the visitors admitted before it still have their heavy
    request to make, the rate stays low; it rises again once that load has
    come and gone, not before."""
    run = await simulate(redis_url, "delayed", 1, 60)
    first_cut = next(i for i, reason in enumerate(run.reasons) if " cut: " in reason)
    after = run.rates[first_cut + 2 : first_cut + 12]
    assert max(after) <= max(run.rates[:first_cut]) / 2, (run.rates, first_cut)


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


async def test_responses_from_before_a_quiet_spell_are_not_judged_after_it(store: Store) -> None:
    """The figures cover the last window and the one before it, ten seconds
    each at most. A slow checkout, then no gated traffic for two minutes
    (its visitors gone), then the app fast again: the first responses after
    the lull were judged with the slow ones from before it, a p95 of 892 ms
    over 12 responses of which 4 were new, and the rate was cut to the
    floor (a newcomer's trial). Windows older than two windows' length are
    dropped: the first look after a lull sees only what came after it."""
    the_room = room(rate=10, target=Health(p95_ms=300, floor=1, ceiling=200))
    await fill_line(store, the_room)
    for second in range(8):  # slow at a light load: the rate is not yet cut
        await store.report(the_room, 2, 0, buckets(2, 900), buckets(2, 900), now=T0 + second * 1000)
    slow = await store.stats(the_room, now=T0 + 8_000)
    assert slow["p95_ms"] > 300, slow
    quiet = T0 + 8_000 + 120_000
    reasons = []
    for second in range(5):  # fast again, a request now and then
        now = quiet + second * 1000
        await store.report(the_room, 1, 0, buckets(1, 5), buckets(1, 5), now=now)
        stats = await store.stats(the_room, now=now)
        reasons.append((stats["rate"], stats["p95_ms"], stats["samples"], stats["health_reason"]))
    assert all(p95 < 300 for _, p95, _, _ in reasons), reasons
    assert not any(why.startswith(("cut", "lower")) for *_, why in reasons), reasons


async def test_an_overload_just_after_a_quiet_spell_is_read_over_its_own_seconds(store: Store) -> None:
    """The windows dropped after a lull began where the old one had, two
    minutes before: the first reports' work a second was read over two
    minutes, 20 times too low, and an overload then set a capacity of
    19 ms a second where the app completed some 2,700 (a review). The span
    starts with the first report after the lull."""
    the_room = room(rate=10, target=Health(p95_ms=300, floor=1, ceiling=200))
    await fill_line(store, the_room)
    for second in range(8):
        await store.report(the_room, 20, 0, buckets(20, 100), buckets(20, 100), now=T0 + second * 1000)
    quiet = T0 + 8_000 + 120_000
    await store.report(the_room, 20, 0, buckets(20, 900), buckets(20, 900), now=quiet)
    stats = await store.stats(the_room, now=quiet)
    assert stats["health_reason"].startswith("cut:"), stats["health_reason"]
    health = store.keys(the_room.name)[0].rsplit(":", 1)[0] + ":health"
    capacity = float(await store.client.hget(health, "capacity_ms") or 0)
    assert capacity >= 1000, capacity  # ms of work a second (0.9 of the 2,700 completed)


async def test_a_room_at_its_floor_gathers_evidence_and_climbs_again(store: Store) -> None:
    """At a floor of one a second, with a request per visitor, a second has
    one response: too few to judge in windows of a second or two, so the
    rate stayed at the floor after the app recovered. A window now lasts
    until it holds enough responses (10 s at most). Each doubling waits
    until the app has served the last rate for a visit (``settle``, 10 s
    here), so from 1 to 8 takes a minute, not half of one."""
    the_room = room(rate=1, target=Health(p95_ms=300, floor=1, ceiling=200))
    await fill_line(store, the_room)
    rates = []
    for second in range(60):
        now = T0 + second * 1000
        rate = (await store.stats(the_room, now=now))["rate"]
        rates.append(rate)
        await store.report(the_room, rate, 0, buckets(rate, 20), buckets(rate, 10), None, rate, now=now)
    assert max(rates[:15]) >= 2, rates  # judged within seconds, not stuck
    assert rates[-1] >= 8, rates


async def test_a_quiet_second_of_a_shedding_backend_is_no_room_to_probe(store: Store) -> None:
    """Fast 503s now and then: 1.5 % of the responses fail (under the 2 %
    maximum, never beyond chance), none in two seconds out of three.
    Room to probe needs errors under half the maximum over the last few
    seconds, not in one window that happened to hold none: once the
    pattern has shown, no raise."""
    the_room = room(rate=5)
    await fill_line(store, the_room)

    def load(second: int, rate: int) -> tuple[int, int, float]:
        # The load follows the rate: six responses a visitor, at least as many fail.
        return 6 * rate, -(-rate * 27 // 100) if second % 3 == 0 else 0, 40.0

    rates, reasons = await looks(store, the_room, 90, load)
    # (The first looks have seen one error: they may probe.)
    assert max(rates[10:]) == rates[10], list(zip(rates, reasons, strict=True))


async def test_a_young_room_waits_for_its_first_admissions_to_show(store: Store) -> None:
    """The first second of a room's first admissions is no evidence of room
    to grow: their visits have barely begun. The first probe waits as any
    other does for the last change to show (``settle``: 10 s here), then
    the room climbs. (It doubled at its first look, one second in.)"""
    the_room = room(rate=5)
    await fill_line(store, the_room)
    rates = []
    for second in range(30):
        now = T0 + second * 1000
        rates.append((await store.stats(the_room, now=now))["rate"])
        load = 2 * rates[-1]
        await store.report(the_room, load, 0, buckets(load, 20), buckets(load, 10), None, load, now=now)
    assert rates[:10] == [5] * 10, rates
    assert rates[-1] > 5, rates


async def test_an_overload_above_a_guessed_capacity_is_where_the_limit_is(store: Store) -> None:
    """A probe's capacity is a guess (twice what the app was doing); then
    the visitors ask four times more and the app overloads while doing more
    than the guess. That overload, beyond chance, is where the app's limit
    is: the rate is cut. (It held at the probe's rate, "the last cut is
    still showing", with no cut ever made.)"""
    the_room = room(rate=5)
    await fill_line(store, the_room)
    rates, reasons = [], []
    probed = None
    for second in range(40):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        rates.append(stats["rate"])
        reasons.append(stats["health_reason"])
        if probed is None and stats["health_reason"].startswith("raise"):
            probed = second
        if probed is None:
            load, ms = 6 * rates[-1], 20.0
        else:
            load, ms = 24 * rates[-1], 2000.0
        await store.report(the_room, load, 0, buckets(load, ms), buckets(load, ms / 2), None, load, now=now)
    assert probed is not None, reasons
    assert min(rates[probed + 1 : probed + 5]) < rates[probed], list(zip(rates, reasons, strict=True))


async def test_nobody_waiting_no_raise(store: Store) -> None:
    the_room = room(rate=7)
    trace = await run(store, the_room, Plant(capacity=1000), 30, 0)
    assert {rate for rate, _ in trace} == {7}
    assert (await store.stats(the_room, now=T0 + 30_000))[
        "health_reason"
    ] == "hold: within target, nobody waiting"


async def test_bounds_hold(store: Store) -> None:
    the_room = room(rate=10, target=Health(p95_ms=300, floor=6, ceiling=12))
    await fill_line(store, the_room)
    plant = Plant(capacity=10_000)
    assert max(rate for rate, _ in await run(store, the_room, plant, 40, 0)) == 12
    plant.capacity = 5  # hopeless: the floor still lets the line move
    trace = await run(store, the_room, plant, 60, 40)
    assert min(rate for rate, _ in trace) == 6
    assert all(6 <= rate <= 12 for rate, _ in trace)
    stats = await store.stats(the_room, now=T0 + 100_000)
    # Over the target at the floor for a visit's length: the room says the
    # target is out of reach instead of starving the line for nothing.
    assert stats["health_reason"].startswith("target out of reach: p95 at minimal load "), stats


async def test_the_controllers_rate_goes_with_the_target_from_code(store: Store) -> None:
    """A room rehearsed with a target, whose controller raised its rate,
    then deployed with a fixed rate and no target: the controller's last
    rate stayed as one set at run time over the code's (`list` and the
    start-up log said so, and the fixed room admitted at it; a newcomer's
    trial: 6 a second where the code said 2). It goes with the target; an
    operator's own value (a pin) stays, as any run-time setting does."""
    rehearsed = room(rate=5, target=Health(p95_ms=300))
    fixed = room(rate=2, target=None)
    await fill_line(store, rehearsed)
    trace = await run(store, rehearsed, Plant(capacity=10_000), 40, 0)
    assert max(rate for rate, _ in trace) > 5, trace
    # `per` set alone leaves the rate the controller's: the pair goes with it.
    await store.configure(rehearsed, per=2.0, now=T0 + 40_500)
    # A rolling deploy: processes with the target may still report for a
    # while, and would write it again. Once none has looked for 30 s, it goes.
    assert (await store.stats(fixed, now=T0 + 41_000))["rate"] > 5
    stats = await store.stats(fixed, now=T0 + 71_000)
    assert (stats["rate"], stats["per"], stats["run_time"]) == (2, 1000, []), stats
    # Pinned by an operator, then deployed without the target: theirs stays.
    await store.stats(rehearsed, now=T0 + 72_000)
    await store.configure(rehearsed, rate=7, now=T0 + 72_000)
    assert (await store.stats(fixed, now=T0 + 73_000))["rate"] == 7
    # Given back to the controller (`--auto`): the controller's again.
    await store.configure(rehearsed, pinned=None, now=T0 + 74_000)
    assert (await store.stats(fixed, now=T0 + 75_000))["rate"] == 2


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
        assert rates[44] > 5  # raised while all three reported
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


async def test_a_target_out_of_reach_is_said_by_show_list_and_metrics(redis_url: str) -> None:
    """Every response takes twice the target whatever the load: the room
    names it in its stats (`show`, the back office), under `list` and as a
    metric, with the p95 it measured at its floor; it climbs again from the
    floor and holds the p95 under 1.5x that instead of the target: an app
    no slower at any load lets the line move faster."""
    import subprocess
    import sys

    from queuegate.metrics import metrics_text

    prefix = f"qgr{time.time_ns() % 10**9}"
    store = Store(connect(redis_url, 5.0), prefix=prefix)
    try:
        the_room = room(rate=5, target=Health(p95_ms=300, floor=1, settle=5))
        await fill_line(store, the_room)
        rates, reasons = [], []
        for second in range(40):
            now = T0 + second * 1000
            stats = await store.stats(the_room, now=now)
            rate = stats["rate"]
            rates.append(rate)
            reasons.append(stats["health_reason"])
            count = 3 * rate
            await store.report(
                the_room, count, 0, buckets(count, 600), buckets(count, 300), None, count, now=now
            )
        stats = await store.stats(the_room, now=T0 + 40_000)
        assert stats["health_reason"].startswith("target out of reach: p95 at minimal load 5"), stats
        assert 500 <= stats["out_of_reach_ms"] <= 600
        named = next(i for i, why in enumerate(reasons) if why.startswith("target out of reach"))
        assert named <= 30
        assert rates[named - 1] == 1
        after = rates[named:]
        assert all(later >= earlier for earlier, later in itertools.pairwise(after)), after
        assert rates[-1] > 2 * rates[named], after  # climbing, not held at the floor
        assert "held under 8" in stats["health_reason"]  # 1.5 x the p95 at minimal load
        assert b'queuegate_target_out_of_reach_p95_seconds{room="plant"} 0.5' in await metrics_text(store)
    finally:
        await store.aclose()
    env = {"QUEUEGATE_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "queuegate", "--prefix", prefix, "list"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "plant: target out of reach: p95 at minimal load 5" in listed.stdout, listed


async def test_the_admissions_record_is_kept_to_an_hour_without_any_report(store: Store) -> None:
    """The record the visit's ages are read from is written at each
    admission; with no report ever coming to trim it, the admissions
    themselves keep it to the controller's hour."""
    the_room = room(rate=5)
    await fill_line(store, the_room)
    record = store.keys(the_room.name)[4][: -len("state")] + "health:admits"
    keys = store.keys(the_room.name)
    for minute in range(0, 150, 10):
        now = T0 + minute * 60_000
        # The line keeps polling (else it is dropped after `abandon`).
        await store.client.zadd(keys[2], {f"v{i}": now for i in range(20_000)})
        await store.stats(the_room, now=now)
    oldest = await store.client.zrangebyscore(record, "-inf", "+inf", start=0, num=1, withscores=True)
    assert float(oldest[0][1]) >= T0 + 140 * 60_000 - 3_610_000
    assert await store.client.zcard(record) <= 8


async def test_a_queue_draining_at_the_floor_is_not_a_target_out_of_reach(redis_url: str) -> None:
    """A pool whose capacity falls to a third: the room cuts to its floor
    while the visitors inside finish the queue they met, for longer than a
    visit. That is not "minimal load": the app is finishing work given
    before. (The room named the target out of reach, went back to its rate
    from before the fall and held the app over its target for the whole
    phase.)"""
    run = await simulate(redis_url, "pool", 4, 120)
    named = [(i, why) for i, why in enumerate(run.reasons) if "out of reach" in why]
    assert not named, named[:3]


async def test_a_drain_never_walks_the_capacity_down(store: Store) -> None:
    """After a cut, the app finishes the queue it built: still over the
    target, completing less than before, but given even less (admissions
    were cut). That reading is not the app's capacity: no second cut."""
    the_room = room(rate=20, target=Health(p95_ms=300, floor=1, ceiling=200))
    await fill_line(store, the_room)
    rates, reasons = [], []
    for second in range(40):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        rates.append(stats["rate"])
        reasons.append(stats["health_reason"])
        if second < 20:  # 60 requests a second, within target
            done, started, ms = 60, 60, 20.0
        elif second < 24:  # overloaded: given all it had, slow
            done, started, ms = 60, 60, 2000.0
        else:  # the drain: finishing its queue, given little
            done, started, ms = 30, 5, 1500.0
        await store.report(the_room, done, 0, buckets(done, ms), buckets(done, ms), None, started, now=now)
    cuts = [i for i, why in enumerate(reasons) if why.startswith("cut:")]
    assert cuts, reasons
    assert all(i < 26 for i in cuts), list(zip(rates, reasons, strict=True))


async def test_errors_over_their_maximum_are_graded_and_forgotten_once_gone(store: Store) -> None:
    """Fast 503s at 5 % of the responses (the maximum is 2 %), never beyond
    chance in 30 a second: the rate comes down step by step (graded), each
    step once the last has shown; once the errors stop, the errors of the
    last seconds that the faded counts remember lower nothing more."""
    the_room = room(rate=10)
    await fill_line(store, the_room)

    def load(second: int, rate: int) -> tuple[int, int, float]:
        failing = 10 <= second < 40 and second % 2 == 0
        return 3 * rate, round(3 * rate * 0.1) if failing else 0, 40.0  # 5 % over two seconds

    rates, reasons = await looks(store, the_room, 60, load)
    graded = [i for i, why in enumerate(reasons) if why.endswith("(graded)")]
    assert graded, reasons
    for i in graded:
        # A step, not a dive to the floor and back: at most 30 % lower
        # (in whole visitors), and no raise while it shows (settle: 10 s).
        assert rates[i] >= int(0.7 * rates[i - 1]), list(zip(rates, reasons, strict=True))
        assert max(rates[i : i + 10]) <= rates[i], list(zip(rates, reasons, strict=True))
    assert rates[40] < rates[10], list(zip(rates, reasons, strict=True))
    assert not any(why.startswith("cut:") for why in reasons), reasons
    assert min(rates[42:]) == rates[42], list(zip(rates, reasons, strict=True))


async def test_a_second_without_503s_is_no_evidence_of_capacity(store: Store) -> None:
    """Fast 503s in one second of three (4 of 30, about 3.6 % of the
    responses, never beyond chance), more served in the seconds between.
    A window of two seconds without errors is within target, but the
    errors over the last few seconds are not: it does not raise the
    capacity. (It did, to what those two seconds served, and the model
    raised the rate back over each graded step a few seconds after it:
    the fast 503s' saw-tooth.)"""
    the_room = room(rate=10)
    await fill_line(store, the_room)
    health = store.keys(the_room.name)[4][: -len("state")] + "health"
    capacities, reasons = [], []
    for second in range(60):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        reasons.append(stats["health_reason"])
        capacities.append(float(await store.client.hget(health, "capacity_ms") or 0))
        failing = second >= 20 and second % 3 == 0
        count = 30 if second < 20 or failing else 40
        errors = 4 if failing else 0
        await store.report(
            the_room, count, errors, buckets(count, 40), buckets(count, 20), None, count, now=now
        )
    # From second 30 the errors over the last few seconds are over their
    # maximum at every look (before, the seconds without errors before
    # them still weighed): the graded steps lower the capacity, and no
    # look raises it.
    assert not any(why.startswith("cut:") for why in reasons), reasons
    assert max(capacities[30:]) <= capacities[30], list(zip(capacities, reasons, strict=True))
    assert capacities[-1] < capacities[30], capacities


async def test_probes_past_the_last_overload_start_once_a_minute(store: Store) -> None:
    """A backend of fixed capacity: the room finds it, and probes past it
    again (overloading it each time) once a minute at most: two turns of
    the rate a minute, not a saw-tooth."""
    the_room = room(rate=5, target=Health(p95_ms=300, floor=1, ceiling=400, settle=4))
    await fill_line(store, the_room)
    plant = Plant(capacity=120)
    reasons = []
    for second in range(240):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        reasons.append(stats["health_reason"])
        done, errors, p95, started = plant.step(stats["rate"])
        if done:
            await store.report(
                the_room, done, errors, buckets(done, p95), buckets(done, p95 / 2), None, started, now=now
            )
    cuts = [i for i, why in enumerate(reasons) if why.startswith("cut:")]
    # An overload (its cuts, a few seconds apart) ends each probe past the
    # last one; they start a minute apart at least.
    overloads = [i for n, i in enumerate(cuts) if n == 0 or i - cuts[n - 1] > 15]
    assert len(overloads) >= 3, (cuts, reasons)
    gaps = [b - a for a, b in itertools.pairwise(overloads[1:])]  # after the first climb
    assert min(gaps) >= 50, (cuts, reasons)
    starts = [i for i, why in enumerate(reasons) if "at the last overload" in why]
    assert starts, reasons


async def test_an_age_first_seen_in_a_queue_costs_its_work_not_its_wait(store: Store) -> None:
    """Requests at an age the room had not seen come when a queue stretches
    the visits. Their first cost is read against the report's slowdown (the
    ages already known, 4x slower than their cost): 100 ms, not the 400 ms
    they took. (The visit grew by the queue it met: after an overload the
    model thought each visitor brought twice the work, and admitted half.)"""
    from queuegate.health import UNKNOWN_VISIT

    the_room = room(rate=10)
    await fill_line(store, the_room)
    for second in range(23):
        now = T0 + second * 1000
        await store.stats(the_room, now=now)
        visits = [0.0] * (3 * (UNKNOWN_VISIT + 1))
        ms = 100.0 if second < 20 else 400.0
        visits[0:3] = [30, 30, 30 * ms]  # age under 1 s: known from the start
        if second >= 20:
            visits[6:9] = [10, 10, 10 * ms]  # age 2-4 s: first seen in the queue
        count = 40 if second >= 20 else 30
        await store.report(
            the_room, count, 0, buckets(count, ms), buckets(count, ms), None, count, visits=visits, now=now
        )
    health = store.keys(the_room.name)[4][: -len("state")] + "health"
    costs = [float(v or 0) for v in await store.client.hmget(health, "k1", "k3")]
    assert costs[0] == pytest.approx(100, rel=0.05)
    assert costs[1] == pytest.approx(100, rel=0.05), costs


async def test_a_graded_step_is_a_step_not_a_dive(redis_url: str) -> None:
    """Fast 503s while the room climbs: a graded step lowers the rate by its
    share, not to the floor because the visitors admitted a second before
    commit more than the lowered capacity (and back up a second later)."""
    run = await simulate(redis_url, "shedding", 3, 120)
    for second, reason in enumerate(run.reasons):
        if reason.endswith("(graded)"):
            before, after = run.rates[second - 1], run.rates[second]
            assert after >= int(0.7 * before), (second, run.rates[second - 3 : second + 3])
            assert max(run.rates[second : second + 6]) <= after, (second, run.rates[second - 3 : second + 8])
            # Nor halved by the model a look later, while the step shows
            # (only an overload beyond chance may cut under it, and the
            # seconds after such a cut are the cut's).
            for later in range(second + 1, min(second + 6, len(run.rates))):
                if " cut: " in run.reasons[later]:
                    break
                assert run.rates[later] >= after, (second, later, run.rates[second - 3 : second + 8])


async def test_a_target_out_of_reach_stays_named_until_a_visit_within_it(store: Store) -> None:
    """Slow at any load, named out of reach; then three fast seconds, and slow
    again (the slow requests of a moment before still finishing). A look
    under the target is no evidence that it is in reach: no cut against
    the target (it cut the line to the floor as the demo's checkout got
    fast again)."""
    the_room = room(rate=5, target=Health(p95_ms=300, floor=1, settle=5))
    await fill_line(store, the_room)
    _, reasons = await looks(
        store, the_room, 60, lambda second, rate: (3 * rate, 0, 100.0 if 45 <= second < 48 else 600.0)
    )
    named = next(i for i, why in enumerate(reasons) if why.startswith("target out of reach"))
    assert named < 40, reasons
    assert all(why.startswith("target out of reach") for why in reasons[named:]), reasons[named:]


async def test_a_target_out_of_reach_is_named_beside_the_apps_background(store: Store) -> None:
    """Slow at any load, and serving 30 requests a second of no visit of
    the room: at the floor, the app does more than the floor's visitors
    bring, but the rest is its background, not a queue from before. It is
    named within 30 s. (It sat at the floor for good.)"""
    from queuegate.health import UNKNOWN_VISIT

    the_room = room(rate=5, target=Health(p95_ms=300, floor=1, settle=5))
    await fill_line(store, the_room)
    background = 30

    def visits(second: int, rate: int) -> list[float]:
        by_age = [0.0] * (3 * (UNKNOWN_VISIT + 1))
        by_age[0:3] = [3 * rate, 3 * rate, 3 * rate * 600.0]
        by_age[3 * UNKNOWN_VISIT : 3 * UNKNOWN_VISIT + 3] = [background, background, background * 600.0]
        return by_age

    def load(second: int, rate: int) -> tuple[int, int, float]:
        return 3 * rate + background, 0, 600.0

    _, reasons = await looks(store, the_room, 40, load, visits)
    assert any(why.startswith("target out of reach") for why in reasons[:31]), reasons


async def test_a_target_out_of_reach_is_tried_again_once_the_app_is_faster(store: Store) -> None:
    """Named out of reach at 600 ms; then the app gets faster, 390 ms at
    the room's rate and under the target a little below it. Its p95 a
    fifth under what it was at minimal load: the name is stale, the target
    is tried again and met. (It kept the name and 390 ms for good.)"""
    the_room = room(rate=5, target=Health(p95_ms=300, floor=1, settle=5, ceiling=400))
    await fill_line(store, the_room)
    plant = Plant(capacity=55)
    reasons, p95s = [], []
    for second in range(180):
        now = T0 + second * 1000
        stats = await store.stats(the_room, now=now)
        reasons.append(stats["health_reason"])
        rate = stats["rate"]
        if second < 40:
            done, started, p95 = 3 * rate, 3 * rate, 600.0
        else:
            done, _, p95, started = plant.step(rate)
        p95s.append(p95)
        if done:
            await store.report(
                the_room, done, 0, buckets(done, p95), buckets(done, p95 / 2), None, started, now=now
            )
    assert any(why.startswith("target out of reach") for why in reasons[:40]), reasons
    assert not reasons[-1].startswith("target out of reach"), reasons[-20:]
    assert max(p95s[-30:]) <= 300, p95s[-30:]


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("raise: within target, visitors waiting (capacity x1.25)", "raising"),
        ("raise: to the floor, 1", "raising"),
        ("hold: within target, nobody waiting", "holding"),
        ("hold: p95 420 ms over the 300 ms target, the last cut is still showing", "holding"),
        ("hold: pinned by the operator", "pinned by an operator"),
        ("hold: the line is not moving (paused)", "holding: the line is not moving"),
        ("cut: p95 420 ms over the 300 ms target", "cut: app over target"),
        ("cut: error rate 4.0% over 2.0%", "cut: app errors over the limit"),
        ("lower: error rate 3.1% over 2.0% (graded)", "lowering: app errors over the limit"),
        ("lower: the visitors inside will bring more than the app can serve", "lowering"),
        ("target out of reach: p95 at minimal load 900 ms", "target out of reach"),
        ("", ""),
        ("ponder: something new", "ponder"),
    ],
)
def test_each_reason_leads_with_a_short_verdict(reason: str, said: str) -> None:
    assert verdict(reason) == said


def test_every_reason_the_controller_writes_has_a_verdict_of_its_own() -> None:
    """health.lua's reasons, by their leading words, each known to
    queuegate.target.verdict (a new form would show only its first word)."""
    law = (Path(queuegate.__file__).parent / "scripts" / "health.lua").read_text()
    starts = set(re.findall(r"reason = (?:string\.format\()?'([a-z ]+):", law))
    assert {"raise", "hold", "cut", "lower", "target out of reach"} <= starts
    assert starts <= {start.split(":")[0] for start, _ in VERDICTS}
    # Each verdict's own form names a reason the law writes, word for word
    # (a reworded reason would fall back to its first word's verdict): the
    # reasons as written, and those made of a prefix and a `why`.
    written = set(re.findall(r"'((?:hold|raise|lower|cut|target out of reach): [^']*)'", law))
    whys = re.findall(r"why = string\.format\('([^']*)'", law)
    written |= {prefix + why for prefix in written if prefix.endswith(": ") for why in whys}
    for start, _ in VERDICTS:
        assert any(reason.startswith(start) for reason in written), start
