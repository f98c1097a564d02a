"""Backends of several shapes for the simulated adaptive benchmark
(``benchmarks.adaptive_sim``): the plants a health-following room is judged
over, each with its parameters drawn at random per seed.

A plant is servers and a visit (their machinery is ``benchmarks.plant_model``).
Its capacity changes in phases, and it may be down for a while (every
request failing fast, or held until a proxy's timeout).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .plant_model import (
    POOL_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    SHED_MS,
    Autoscaled,
    Cold,
    Plant,
    Pool,
    Processor,
    Report,
    Server,
    Shedding,
    Stalling,
    Step,
)

__all__ = [
    "FAMILIES",
    "POOL_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "SHED_MS",
    "Autoscaled",
    "Cold",
    "Contended",
    "Memory",
    "Mixed",
    "Plant",
    "Pool",
    "Processor",
    "Report",
    "Retrying",
    "Sessions",
    "Stalling",
    "Step",
    "capacity_rate",
    "make_plant",
]


def _fixed(value: float) -> Callable[[random.Random], float]:
    return lambda rng: value


def _uniform(low: float, high: float) -> Callable[[random.Random], float]:
    return lambda rng: rng.uniform(low, high)


def _lognormal(median: float, p99: float) -> Callable[[random.Random], float]:
    sigma = math.log(p99 / median) / 2.326
    return lambda rng: median * math.exp(rng.gauss(0, sigma))


# A family's draw: its servers, its visit, its phases' capacity shares,
# its target (ms) and extras (max_rate, background, drift).
Built = tuple[dict[str, Server], list[Step], list[float], float, dict[str, object]]


@dataclass(frozen=True)
class Family:
    """A shape of backend: its plant, drawn from a seed, and its target."""

    name: str
    about: str
    build: Callable[[random.Random], Built]


def _shop(rng: random.Random, server: str = "app") -> list[Step]:
    think = rng.uniform(0.2, 1.0)
    return [Step(_fixed(think), server), Step(_fixed(think), server), Step(_fixed(think), server)]


def _phases(rng: random.Random) -> list[float]:
    return [1.0, rng.uniform(0.3, 0.5), rng.uniform(1.3, 1.8)]


def _pool(rng: random.Random) -> Built:
    work = rng.uniform(100, 300)
    slots = rng.uniform(6, 14)
    return {"app": Pool(slots, _uniform(0.8 * work, 1.2 * work))}, _shop(rng), _phases(rng), 600.0, {}


def _processor(
    rng: random.Random,
) -> Built:
    work = rng.uniform(50, 150)
    slots = rng.uniform(20, 40)
    return {"app": Processor(slots, _uniform(0.7 * work, 1.3 * work))}, _shop(rng), _phases(rng), 600.0, {}


def _heavy_tail(
    rng: random.Random,
) -> Built:
    # Median 50 ms, p99 about 1 s at any load; far more places than used.
    return (
        {"app": Pool(400, _lognormal(50, rng.uniform(800, 1200)))},
        _shop(rng),
        [1.0, 1.0, 1.0],
        600.0,
        {"max_rate": 25},
    )


def _shedding(
    rng: random.Random,
) -> Built:
    work = rng.uniform(40, 100)
    limit = rng.uniform(3, 6)  # requests at once: a rate of limit / work
    return {"app": Shedding(limit, _uniform(0.8 * work, 1.2 * work))}, _shop(rng), _phases(rng), 600.0, {}


def _delayed(
    measured_light: bool,
) -> Callable[..., Built]:
    def build(
        rng: random.Random,
    ) -> Built:
        work = rng.uniform(150, 300)
        slots = rng.uniform(4, 10)
        delay = rng.uniform(10, 50)
        light = [Step(_uniform(0.5, 3.0), "pages", measured_light) for _ in range(rng.randint(2, 5))]
        heavy = Step(_uniform(delay, delay + 10), "app")
        servers: dict[str, Server] = {
            "pages": Pool(1000, _uniform(10, 30)),
            "app": Pool(slots, _uniform(0.8 * work, 1.2 * work)),
        }
        return servers, [*light, heavy], _phases(rng), 600.0, {}

    return build


def _unseen(
    rng: random.Random,
) -> Built:
    servers, visit, _, target, _ = _pool(rng)
    pool = servers["app"]
    assert isinstance(pool, Pool)
    # Background load on the same places, a share of them, changing slowly.
    share = rng.uniform(0.2, 0.4)
    per_s = pool.base * 1000 / 200 * share
    return (
        servers,
        visit,
        [1.0, 1.0, 1.0],
        target,
        {
            "background": lambda second: per_s * (1 + 0.5 * math.sin(second / 40)),
        },
    )


def _drift(rng: random.Random) -> Built:
    servers, visit, _, target, _ = _pool(rng)
    low = rng.uniform(0.5, 0.7)
    return servers, visit, [1.0, low, 1.0], target, {"drift": True}


def _unreachable(
    rng: random.Random,
) -> Built:
    flat = rng.uniform(500, 700)
    return (
        {"app": Pool(400, _uniform(0.95 * flat, 1.05 * flat))},
        _shop(rng),
        [1.0, 1.0, 1.0],
        0.7 * flat,
        {"max_rate": 25},
    )


def _hang(rng: random.Random) -> Built:
    # A pool whose queue is held by a proxy until its timeout: past its
    # capacity, requests wait 10-30 s and then fail (504). The gate sees
    # them as in flight until then.
    work = rng.uniform(100, 300)
    slots = rng.uniform(6, 14)
    timeout = rng.uniform(10, 30)
    return (
        {"app": Pool(slots, _uniform(0.8 * work, 1.2 * work), timeout)},
        _shop(rng),
        _phases(rng),
        600.0,
        {},
    )


def _outage(hang: bool) -> Callable[..., Built]:
    def build(rng: random.Random) -> Built:
        servers, visit, _, target, _ = _pool(rng)
        # Down once in the second phase, 10-40 s from a fifth to two fifths
        # into it, then back at full capacity (the third phase shows
        # whether the rate came back).
        start = rng.uniform(0.2, 0.4)
        length = rng.uniform(10, 40)
        hang_s = rng.uniform(10, 30) if hang else 0.0
        return servers, visit, [1.0, 1.0, 1.0], target, {"down": (1, start, length), "hang": hang_s}

    return build


def _autoscale(rng: random.Random) -> Built:
    work = rng.uniform(100, 300)
    slots = rng.uniform(4, 8)
    server = Autoscaled(
        slots, _uniform(0.8 * work, 1.2 * work), rng.randint(2, 3), rng.randint(20, 40), rng.randint(60, 120)
    )
    return {"app": server}, _shop(rng), [1.0, 1.0, 1.0], 600.0, {}


def _cold_start(rng: random.Random) -> Built:
    work = rng.uniform(100, 300)
    slots = rng.uniform(6, 14)
    server = Cold(slots, _uniform(0.8 * work, 1.2 * work), rng.uniform(2, 4), rng.uniform(30, 60))
    return {"app": server}, _shop(rng), [1.0, 1.0, 1.0], 600.0, {}


def _stalls(rng: random.Random) -> Built:
    work = rng.uniform(100, 300)
    slots = rng.uniform(6, 14)
    every = rng.uniform(15, 45)
    pause = rng.uniform(0.4, 1.5)
    server = Stalling(slots, _uniform(0.8 * work, 1.2 * work), every, pause, rng.uniform(0, every))
    return {"app": server}, _shop(rng), [1.0, 1.0, 1.0], 600.0, {}


# Shapes the law was not tuned on (an auditor's probe, 2026-11-28).


class Contended(Pool):
    """Congestion collapse (lock contention, thrashing): from 0.8 of its
    places busy on, a request's work grows with how many requests are in
    the server (in service or queued) per place, up to ``most`` x. Past
    the knee the app completes less the more it is given."""

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], contention: float, most: float
    ) -> None:
        super().__init__(slots, work)
        self.contention, self.most = contention, most

    def took(self, plant: Plant) -> float:
        crowd = (self.busy + len(self.queue)) / self.slots
        stretch = min(self.most, 1 + self.contention * max(0.0, crowd - 0.8))
        return self.work(plant.rng) * stretch


class Retrying(Plant):
    """Clients that retry a failed (503/504) or slow (over 3 s) request up
    to ``retries`` times after ``backoff`` s: the gate sees each attempt,
    and errors add load. A visit is lost only once its retries are spent."""

    retries = 2
    backoff = (0.1, 1.0)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tries: dict[tuple[int, int], int] = {}

    def respond(self, visitor: int, step: int, began: float, now: float, failed: bool) -> None:
        key = (visitor, step)
        bad = failed or (now - began) > REQUEST_TIMEOUT_S
        if visitor > 0 and bad and self.tries.get(key, 0) < self.retries:
            self.tries[key] = self.tries.get(key, 0) + 1
            lost = visitor in self._lost
            super().respond(visitor, step, began, now, failed)  # measured as it failed
            if not lost:
                self._lost.discard(visitor)
            self.at(now + self.rng.uniform(*self.backoff), "start", visitor, step)
            return
        super().respond(visitor, step, began, now, failed)


class Sessions(Plant):
    """A plant that counts the visits open (admitted, not yet ended by
    their last response or a failure): each holds memory, a socket, a
    session for the whole visit."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.open = 0

    def admit(self, second: int, count: int) -> None:
        super().admit(second, count)
        self.open += count

    def respond(self, visitor: int, step: int, began: float, now: float, failed: bool) -> None:
        super().respond(visitor, step, began, now, failed)
        if visitor > 0 and (failed or (now - began) > REQUEST_TIMEOUT_S or step == len(self.visit) - 1):
            self.open -= 1


class Memory(Pool):
    """Light requests on many places whose work grows once the sessions
    open pass ``sessions`` (memory exhausted: swapping, a collector that
    runs all the time): e^(8 x the share over), up to 50x. The capacity is
    in visits at once, not in requests: a visitor's cost is the whole
    visit's stay. The phases change ``sessions``, not the places."""

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], sessions: float, visit_s: float
    ) -> None:
        super().__init__(slots, work)
        self.sessions_base = self.sessions = sessions
        self.visit_s = visit_s

    def resize(self, share: float) -> None:
        self.sessions = self.sessions_base * share

    def took(self, plant: Plant) -> float:
        over = getattr(plant, "open", 0) / self.sessions - 1
        stretch = min(50.0, math.exp(8 * over)) if over > 0 else 1.0
        return self.work(plant.rng) * stretch


class Mixed(Pool):
    """Cheap and dear requests on one pool; the phases change the dear
    ones' share (a sale's searches, a report's exports), not the places:
    the share whose mean cost is the first phase's over the phase's
    share."""

    def __init__(self, slots: float, cheap: float, dear: float, dear_share: float) -> None:
        self.cheap, self.dear = cheap, dear
        self.dear_share = self.first_share = dear_share

        def work(rng: random.Random) -> float:
            mean = self.dear if rng.random() < self.dear_share else self.cheap
            return mean * rng.uniform(0.8, 1.2)

        super().__init__(slots, work)

    def resize(self, share: float) -> None:
        mean = (self.cheap * (1 - self.first_share) + self.dear * self.first_share) / share
        self.dear_share = min(1.0, max(0.0, (mean - self.cheap) / (self.dear - self.cheap)))


def _collapse(rng: random.Random) -> Built:
    work = rng.uniform(100, 300)
    slots = rng.uniform(6, 14)
    server = Contended(slots, _uniform(0.8 * work, 1.2 * work), rng.uniform(0.3, 0.8), rng.uniform(3, 5))
    return {"app": server}, _shop(rng), _phases(rng), 600.0, {}


def _retries(rng: random.Random) -> Built:
    servers, visit, phases, target, _ = _pool(rng)
    retries = rng.randint(2, 3)
    low = rng.uniform(0.1, 0.5)
    backoff = (low, low + rng.uniform(0.2, 1.0))

    def setup(plant: Plant) -> None:
        assert isinstance(plant, Retrying)
        plant.retries, plant.backoff = retries, backoff

    return servers, visit, phases, target, {"plant": Retrying, "setup": setup}


def _sessions(rng: random.Random) -> Built:
    steps = rng.randint(8, 12)
    gap = rng.uniform(2.0, 5.0)
    visit = [Step(_uniform(0.5 * gap, 1.5 * gap), "app") for _ in range(steps)]
    visit_s = steps * gap
    work = rng.uniform(20, 60)
    sessions = rng.uniform(150, 400)
    server = Memory(rng.uniform(30, 60), _uniform(0.8 * work, 1.2 * work), sessions, visit_s)
    return {"app": server}, visit, _phases(rng), 600.0, {"plant": Sessions}


def _mix_shift(rng: random.Random) -> Built:
    cheap = rng.uniform(10, 30)
    dear = rng.uniform(250, 400)
    server = Mixed(rng.uniform(6, 14), cheap, dear, rng.uniform(0.2, 0.3))
    phases = [1.0, rng.uniform(0.4, 0.6), rng.uniform(1.3, 1.6)]
    return {"app": server}, _shop(rng), phases, 600.0, {}


def _low_traffic(rng: random.Random) -> Built:
    # Two requests a visit, 2-3 places of 250-450 ms: 1.5-4 visitors a
    # second at capacity, 3-8 responses a second.
    work = rng.uniform(250, 450)
    think = rng.uniform(0.5, 2.0)
    visit = [Step(_fixed(think), "app"), Step(_fixed(think), "app")]
    phases = [1.0, rng.uniform(0.5, 0.7), rng.uniform(1.3, 1.8)]
    return {"app": Pool(rng.uniform(2, 3.4), _uniform(0.8 * work, 1.2 * work))}, visit, phases, 600.0, {}


FAMILIES = {
    family.name: family
    for family in (
        Family("pool", "a pool of places, latency climbing past its knee (today's benchmark)", _pool),
        Family("processor", "latency rising smoothly with load (a shared CPU)", _processor),
        Family("heavy_tail", "median 50 ms, p99 about 1 s at any load, never loaded", _heavy_tail),
        Family("shedding", "fast 503s beyond capacity, no latency signal", _shedding),
        Family("delayed", "light pages, the heavy request 10-60 s after admission", _delayed(True)),
        Family("delayed_unseen_pages", "the same, the light pages outside the room", _delayed(False)),
        Family("background", "a pool that also serves load the gate does not see", _unseen),
        Family("drift", "capacity drifting slowly down and back", _drift),
        Family("unreachable", "slow at any load: the target is out of reach", _unreachable),
        Family("hang", "a pool whose queue a proxy holds 10-30 s, then 504s", _hang),
        Family("outage", "a pool down 10-40 s (fast 502s), then back at full capacity", _outage(False)),
        Family(
            "outage_silent", "the same, nothing answering: each request held 10-30 s, then 504", _outage(True)
        ),
        Family(
            "autoscale",
            "a pool grown 2-3x after 20-40 s of high use, shrunk after a quiet minute or two",
            _autoscale,
        ),
        Family("cold_start", "a pool 2-4x slower for its first 30-60 s (cold caches)", _cold_start),
        Family("stalls", "a pool that stops 0.4-1.5 s every 15-45 s, at any load (pauses)", _stalls),
        Family(
            "collapse",
            "congestion collapse: past its knee the pool completes less the more it is given",
            _collapse,
        ),
        Family(
            "retries", "a pool whose clients retry 503s and slow answers 2-3 times: errors add load", _retries
        ),
        Family(
            "sessions",
            "each visit holds a session 20-60 s; past the sessions the memory holds, every request slows",
            _sessions,
        ),
        Family("mix_shift", "cheap and dear requests, the dear ones' share changing by phase", _mix_shift),
        Family(
            "low_traffic", "1.5-4 visitors a second at capacity, two requests each: few samples", _low_traffic
        ),
    )
}


def make_plant(family: str, seed: int, phase_seconds: int) -> tuple[Plant, float, dict[str, object]]:
    """The plant of ``family`` for ``seed``, its target (ms) and extras."""
    rng = random.Random(f"{family}:{seed}")
    servers, visit, phases, target, extra = FAMILIES[family].build(rng)
    background = extra.get("background")
    kind = extra.get("plant", Plant)
    assert isinstance(kind, type)
    assert issubclass(kind, Plant)
    plant = kind(
        servers,
        visit,
        phases,
        random.Random(f"{family}:{seed}:run"),
        background=background if callable(background) else None,
        background_server="app",
    )
    plant.phase_seconds = phase_seconds
    setup = extra.get("setup")
    if callable(setup):
        setup(plant)
    if extra.get("drift"):
        total = phase_seconds * len(phases)

        def share(second: int) -> float:
            # Down to the low point over the middle, back up by the end.
            return 1.0 - (1.0 - phases[1]) * math.sin(math.pi * min(second, total) / total)

        plant.share = share
    down = extra.get("down")
    if isinstance(down, tuple):
        phase, start, length = down
        begins = (phase + start) * phase_seconds
        plant.down = [(begins, begins + length)]
        plant.down_hang_s = float(extra.get("hang", 0.0))  # type: ignore[arg-type]
    return plant, target, extra


def capacity_rate(plant: Plant, share: float) -> float:
    """About the most visitors a second the plant's bottleneck serves at
    ``share`` of its capacity (where a sweep of fixed rates centres)."""
    rng = random.Random(0)
    most = math.inf
    for name, server in plant.servers.items():
        requests = sum(1 for step in plant.visit if step.server == name)
        if requests == 0:
            continue
        work = sum(server.work(rng) for _ in range(200)) / 200
        if isinstance(server, Processor):
            work *= Processor.FULL  # at its most, every place is busy
        places = (server.base if isinstance(server, (Pool, Shedding)) else 1000) * share
        if isinstance(server, Autoscaled):
            places *= server.most  # at its largest
        most = min(most, places * 1000 / work / requests)
        if isinstance(server, Memory):
            # Its limit is the visits open at once, not the places.
            most = min(most, server.sessions_base * share / server.visit_s)
    return most
