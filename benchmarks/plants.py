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
    "Plant",
    "Pool",
    "Processor",
    "Report",
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
