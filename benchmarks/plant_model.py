"""A plant's machinery, for the simulated adaptive benchmark's families
(``benchmarks.plants``): servers (a pool of places with a queue that times
out, a server whose latency does not depend on load, a server that sheds
load with fast 503s, a pool whose work grows with load, one that
autoscales, one slow while its caches are cold) and the plant that sends
visits to them. A visit is the requests an admitted visitor makes, each at
a delay after admission or after the one before, on one of the servers,
measured by the gate or not (pages outside the room). Everything runs on a
simulated clock, one second at a time.
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

__all__ = [
    "POOL_TIMEOUT_S",
    "REQUEST_TIMEOUT_S",
    "SHED_MS",
    "Autoscaled",
    "Cold",
    "Plant",
    "Pool",
    "Processor",
    "Report",
    "Server",
    "Shedding",
    "Step",
]

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


class Stalling(Pool):
    """A pool whose work stops for ``pause`` s every ``every`` s from
    ``offset``, whatever the load (a garbage collector's pause, a
    database's checkpoint, a noisy neighbour): requests in service wait the
    pause out, and those that arrive meanwhile queue behind them. Latency
    no rate causes or cures."""

    def __init__(
        self, slots: float, work: Callable[[random.Random], float], every: float, pause: float, offset: float
    ) -> None:
        super().__init__(slots, work)
        self.every, self.pause, self.offset = every, pause, offset

    def took(self, plant: Plant) -> float:
        start = plant.now + plant.clock
        left = self.work(plant.rng) / 1000
        at = start
        while True:
            # The pause at or before ``at``, and the next one.
            k = math.floor((at - self.offset) / self.every)
            begins = self.offset + k * self.every
            if begins <= at < begins + self.pause:
                at = begins + self.pause
                continue
            following = begins + self.every
            if at + left <= following:
                return (at + left - start) * 1000
            left -= following - at
            at = following + self.pause
