"""Backends of several shapes for the simulated adaptive benchmark
(``benchmarks.adaptive_sim``): the plants a health-following room is judged
over, each with its parameters drawn at random per seed.

A plant is servers (a pool of places with a queue that times out, a
server whose latency does not depend on load, a server that sheds load
with fast 503s, a pool that autoscales, one slow while its caches are
cold) and a visit: the requests an admitted visitor makes, each
at a delay after admission or after the one before, on one of the
servers, measured by the gate or not (pages outside the room). Its
capacity changes in phases, and it may be down for a while (every request
failing fast, or held until a proxy's timeout). Everything runs on a simulated clock, one
second at a time.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from queuegate.health import BOUNDS_MS, UNKNOWN_VISIT, visit_bucket

__all__ = ["FAMILIES", "Plant", "Report", "Step", "make_plant"]

REQUEST_TIMEOUT_S = 3.0  # a visitor's request slower than this loses the purchase
POOL_TIMEOUT_S = 2.0  # a request that waits this long for a place fails (503)
SHED_MS = 5.0  # a shed request's 503 takes this long


@dataclass(frozen=True)
class Step:
    """One request of a visit: ``after`` seconds after the last one's end
    (the first: after admission, noticed within a poll), on ``server``."""

    after: Callable[[random.Random], float]
    server: str
    measured: bool = True


@dataclass(order=True)
class _Event:
    at: float
    order: int
    kind: str = field(compare=False)  # "start", "end", "shed"
    visitor: int = field(compare=False, default=0)
    step: int = field(compare=False, default=0)
    began: float = field(compare=False, default=0.0)
    server: Server | None = field(compare=False, default=None)
    failed: bool = field(compare=False, default=False)


class Server:
    """A server: what a request costs and how it waits."""

    def __init__(self, work: Callable[[random.Random], float]) -> None:
        self.work = work  # ms of one request
        self.busy = 0

    def submit(self, plant: Plant, event: _Event, now: float) -> None:
        plant.at(now + self.work(plant.rng) / 1000, "end", event.visitor, event.step, now, self)

    def finished(self, plant: Plant, now: float) -> None:
        pass

    def resize(self, share: float) -> None:
        pass

    def expire(self, plant: Plant, now: float) -> None:
        pass


class Pool(Server):
    """``slots`` places, first come first served; a request that waits
    ``timeout`` s for one fails (at that moment: a 503, or a proxy's 504
    after holding it)."""

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], timeout: float = POOL_TIMEOUT_S
    ) -> None:
        super().__init__(work)
        self.base = slots
        self.slots = max(1, round(slots))
        self.timeout = timeout
        self.queue: deque[_Event] = deque()

    def resize(self, share: float) -> None:
        self.slots = max(1, round(self.base * share))

    def submit(self, plant: Plant, event: _Event, now: float) -> None:
        if self.busy < self.slots:
            self.busy += 1
            plant.at(now + self.took(plant) / 1000, "end", event.visitor, event.step, now, self)
        else:
            event.began = now
            self.queue.append(event)

    def took(self, plant: Plant) -> float:
        """The time (ms) of a request that has just taken a place."""
        return self.work(plant.rng)

    def finished(self, plant: Plant, now: float) -> None:
        self.busy -= 1
        while self.queue and self.busy < self.slots:
            waiting = self.queue.popleft()
            self.busy += 1
            plant.at(now + self.took(plant) / 1000, "end", waiting.visitor, waiting.step, waiting.began, self)

    def expire(self, plant: Plant, now: float) -> None:
        while self.queue and now - self.queue[0].began >= self.timeout:
            late = self.queue.popleft()
            plant.respond(late.visitor, late.step, late.began, now, failed=True)


class Shedding(Server):
    """At most ``limit`` requests at once; the rest get a fast 503."""

    def __init__(self, limit: float, work: Callable[[random.Random], float]) -> None:
        super().__init__(work)
        self.base = limit
        self.limit = max(1, round(limit))

    def resize(self, share: float) -> None:
        self.limit = max(1, round(self.base * share))

    def submit(self, plant: Plant, event: _Event, now: float) -> None:
        if self.busy < self.limit:
            self.busy += 1
            super().submit(plant, event, now)
        else:
            plant.at(now + SHED_MS / 1000, "end", event.visitor, event.step, now, None, failed=True)

    def finished(self, plant: Plant, now: float) -> None:
        self.busy -= 1


@dataclass
class Report:
    """One second's measurements, as the gate would report them."""

    responses: int = 0
    errors: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    in_flight: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    started: int = 0
    # By the visit's age (queuegate.health.visit_bucket): requests started,
    # successful responses and their time (ms), as the gate reports them.
    visits: list[float] = field(default_factory=lambda: [0.0] * (3 * (UNKNOWN_VISIT + 1)))


class Plant:
    """Servers and visits, advanced a second at a time."""

    def __init__(
        self,
        servers: dict[str, Server],
        visit: list[Step],
        phases: list[float],
        rng: random.Random,
        background: Callable[[int], float] | None = None,
        background_server: str = "",
    ) -> None:
        self.servers = servers
        self.visit = visit
        self.phases = phases  # capacity's share in each phase
        self.rng = rng
        self.background = background  # requests a second the gate does not see, by second
        self.background_server = background_server
        self.events: list[_Event] = []
        self.order = 0
        self.admitted_at: dict[int, float] = {}
        self.visitors = 0
        self.flying: dict[tuple[int, int], float] = {}
        self.served: list[tuple[float, float]] = []  # (end, ms) of measured responses
        self.outcomes: list[tuple[float, bool]] = []  # (end, failed) of measured responses
        self.purchases: list[float] = []
        # The capacity's share each second, when it drifts instead of
        # changing by phases.
        self.share: Callable[[int], float] | None = None
        # Outages: (from, to) in s of the run; a request started within one
        # fails, in SHED_MS, or after ``down_hang_s`` (nothing answers: a
        # proxy holds it until its timeout, then a 504).
        self.down: list[tuple[float, float]] = []
        self.down_hang_s = 0.0
        # Added to the run's time where the plant keeps a schedule (its
        # outages, its cold caches): a run that stands for a later part of
        # another (an oracle's phase after its warm-up).
        self.clock = 0.0
        self.now = 0.0  # the time of the event being handled
        self._report = Report()
        self._lost: set[int] = set()

    def at(
        self,
        when: float,
        kind: str,
        visitor: int,
        step: int,
        began: float = 0.0,
        server: Server | None = None,
        failed: bool = False,
    ) -> None:
        self.order += 1
        heapq.heappush(self.events, _Event(when, self.order, kind, visitor, step, began, server, failed))

    def admit(self, second: int, count: int) -> None:
        for _ in range(count):
            self.visitors += 1
            admitted = second + self.rng.random()
            self.admitted_at[self.visitors] = admitted
            noticed = admitted + self.rng.uniform(0, 0.5)  # the page's poll
            self.at(noticed + self.visit[0].after(self.rng), "start", self.visitors, 0)

    def _measured(self, visitor: int, step: int) -> bool:
        return visitor > 0 and self.visit[step].measured

    def _age_bucket(self, visitor: int, at: float) -> int:
        return visit_bucket((at - self.admitted_at[visitor]) * 1000)

    def respond(self, visitor: int, step: int, began: float, now: float, failed: bool) -> None:
        self.flying.pop((visitor, step), None)
        ms = (now - began) * 1000
        if self._measured(visitor, step):
            report = self._report
            report.responses += 1
            report.errors += failed
            report.buckets[bisect.bisect_left(BOUNDS_MS, ms)] += 1
            if not failed:
                age = self._age_bucket(visitor, began)
                report.visits[3 * age + 1] += 1
                report.visits[3 * age + 2] += ms
            self.served.append((now, ms))
            self.outcomes.append((now, failed))
        if visitor <= 0:
            return
        if failed or ms > REQUEST_TIMEOUT_S * 1000:
            self._lost.add(visitor)
            return
        if step == len(self.visit) - 1:
            if visitor not in self._lost:
                self.purchases.append(now)
            return
        self.at(now + self.visit[step + 1].after(self.rng), "start", visitor, step + 1)

    def second(self, second: int) -> Report:
        share = self.phases[min(second // self.phase_seconds, len(self.phases) - 1)]
        if self.share is not None:
            share = self.share(second)
        for server in self.servers.values():
            server.resize(share)
        if self.background is not None:
            count = _poisson(self.rng, self.background(second))
            for _ in range(count):
                self.order += 1
                self.at(second + self.rng.random(), "start", -self.order, 0)
        self._report = Report()
        while self.events and self.events[0].at < second + 1:
            event = heapq.heappop(self.events)
            for server in self.servers.values():
                server.expire(self, event.at)
            self.now = event.at
            if event.kind == "start":
                name = self.background_server if event.visitor < 0 else self.visit[event.step].server
                self.flying[(event.visitor, event.step)] = event.at
                if self._measured(event.visitor, event.step):
                    self._report.started += 1
                    self._report.visits[3 * self._age_bucket(event.visitor, event.at)] += 1
                event.began = event.at
                if self.is_down(event.at):
                    fails = event.at + (self.down_hang_s or SHED_MS / 1000)
                    self.at(fails, "end", event.visitor, event.step, event.at, None, failed=True)
                    continue
                self.servers[name].submit(self, event, event.at)
                continue
            if event.server is not None:
                event.server.finished(self, event.at)
            self.respond(event.visitor, event.step, event.began, event.at, event.failed)
        for server in self.servers.values():
            server.expire(self, second + 1)
        for (visitor, step), began in self.flying.items():
            if self._measured(visitor, step):
                self._report.in_flight[bisect.bisect_left(BOUNDS_MS, (second + 1 - began) * 1000)] += 1
        return self._report

    phase_seconds: int = 60

    def is_down(self, at: float) -> bool:
        return any(start <= at + self.clock < end for start, end in self.down)


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


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


class Processor(Pool):
    """Latency that climbs smoothly with load: many places, work that
    grows with how many are busy (a CPU shared by threads), whether a
    request took its place at once or after waiting for one."""

    FULL = 4.0  # the stretch of a request's work with every place busy

    def took(self, plant: Plant) -> float:
        stretch = 1 + (self.FULL - 1) * (self.busy / self.slots) ** 2
        return self.work(plant.rng) * stretch


class Autoscaled(Pool):
    """A pool that an autoscaler grows by its first size (instances
    added) once its utilisation (places busy or asked for, sampled each
    second) has averaged HOT or more over the last ``react`` seconds, up to
    ``most`` times that size, and shrinks by one step after ``quiet``
    seconds in a row under COLD (as a scale-down's stabilisation window).
    A room that never pushes it never gets the capacity."""

    HOT = 0.7
    COLD = 0.3

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], most: int, react: int, quiet: int
    ) -> None:
        super().__init__(slots, work)
        self.most, self.react, self.quiet = most, react, quiet
        self.level = 1
        self.used: deque[float] = deque(maxlen=react)
        self.cold = 0

    def resize(self, share: float) -> None:
        # Called once a second: the autoscaler's look.
        used = (self.busy + len(self.queue)) / self.slots
        self.used.append(min(1.0, used))
        self.cold = self.cold + 1 if used < self.COLD else 0
        if (
            len(self.used) == self.react
            and sum(self.used) >= self.HOT * self.react
            and self.level < self.most
        ):
            self.level += 1
            self.used.clear()  # the new instances' use is measured afresh
        elif self.cold >= self.quiet and self.level > 1:
            self.level -= 1
            self.cold = 0
        self.slots = max(1, round(self.base * share * self.level))


class Cold(Pool):
    """A pool whose requests cost ``factor`` x their work at the run's
    start (cold caches), falling linearly to their work by ``warm_s``."""

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], factor: float, warm_s: float
    ) -> None:
        super().__init__(slots, work)
        self.factor, self.warm_s = factor, warm_s

    def took(self, plant: Plant) -> float:
        age = max(0.0, plant.now + plant.clock)
        stretch = 1 + (self.factor - 1) * max(0.0, 1 - age / self.warm_s)
        return self.work(plant.rng) * stretch


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
    )
}


def make_plant(family: str, seed: int, phase_seconds: int) -> tuple[Plant, float, dict[str, object]]:
    """The plant of ``family`` for ``seed``, its target (ms) and extras."""
    rng = random.Random(f"{family}:{seed}")
    servers, visit, phases, target, extra = FAMILIES[family].build(rng)
    background = extra.get("background")
    plant = Plant(
        servers,
        visit,
        phases,
        random.Random(f"{family}:{seed}:run"),
        background=background if callable(background) else None,
        background_server="app",
    )
    plant.phase_seconds = phase_seconds
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
    return most
