"""The adaptive benchmark in simulated time: the backend and the visitors of
``benchmarks.adaptive`` modelled instead of served, the controller itself
(``queuegate/scripts/health.lua``) run in a real Redis on simulated clocks.
A run takes a second instead of three minutes, and the same seed gives the
same run, so a change to the law can be judged over many seeds before the
real benchmark's minutes (whose runs differ by as much as most changes do).

    python -m benchmarks.adaptive_sim [--seeds 8] [--phase-seconds 60] [--trace]

The model: a pool of ``slots`` places of WORK_MS each, first come first
served; a request that waits POOL_TIMEOUT_S fails (503) and its visitor
leaves. Each second the room admits its rate; an admitted visitor notices
within the second and a poll (POLL_S), then makes three requests (browse,
cart, pay), THINK_S after the last one's end. Each second, one report:
the responses by latency, the errors, the requests in flight by age, the
requests started. Not modelled: the server's CPU (the real run's worker
also serves the line's polls), the visitors' own timeouts (a request here
takes POOL_TIMEOUT_S + WORK_MS at most, under theirs) and visitors who
give up waiting.

The figures are the real benchmark's (``benchmarks.adaptive.phase_figures``),
each phase's goodput against the best fixed rate for that phase alone in
the same model (a sweep, as the real benchmark's oracle). Beside the
adaptive room, two rooms that know each change: the oracle schedule (each
phase's oracle rate from its start) and the oracle climb (the same rates,
a fall taken at once, a rise doubled every half round trip, the fastest
the law raises): what no controller can beat, and what none that raises
at the law's pace can.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import heapq
import json
import random
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from queuegate import Health, Room
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.health import BOUNDS_MS
from queuegate.store import Store, connect

from .adaptive import (
    PHASES,
    POLL_S,
    POOL_TIMEOUT_S,
    SETTLE_S,
    START_RATE,
    STEPS,
    TARGET_MS,
    THINK_S,
    WORK_MS,
    Record,
    phase_figures,
)

T0 = 1_900_000_000_000  # ms: the simulated clock's start
RUNS = ("oracle_schedule", "oracle_climb", "adaptive")
LINE = 20_000  # visitors waiting at the start: more than any run admits


@dataclass
class Pool:
    """Places of WORK_MS and the requests waiting for one, in order."""

    slots: int
    busy: int = 0
    queue: deque[Event] = field(default_factory=deque)


@dataclass(order=True)
class Event:
    at: float
    order: int
    visitor: int = field(compare=False)
    step: int = field(compare=False)  # the request's index in STEPS
    done: bool = field(compare=False)  # its end (else its start)
    began: float = field(compare=False, default=0.0)
    pool: Pool | None = field(compare=False, default=None)  # where it took a place (its end)


class Backend:
    """The pool and the visitors' requests, advanced a second at a time.

    As in the real benchmark's backend (a semaphore replaced at a change of
    capacity), the requests holding or waiting for a place in the pool
    before a change finish on it; new ones take the new pool."""

    def __init__(self, slots: int, rng: random.Random) -> None:
        self.pools = [Pool(slots)]  # the last one takes new requests
        self.rng = rng
        self.events: list[Event] = []
        self.flying: dict[tuple[int, int], float] = {}  # (visitor, step) -> start
        self.visitors = 0
        self.order = 0
        self.record = Record(started=0.0, started_wall=0.0)

    def resize(self, slots: int) -> None:
        if slots != self.pools[-1].slots:
            self.pools = [pool for pool in self.pools if pool.busy or pool.queue]
            self.pools.append(Pool(slots))

    def _at(
        self, at: float, visitor: int, step: int, done: bool, began: float = 0.0, pool: Pool | None = None
    ) -> None:
        self.order += 1
        heapq.heappush(self.events, Event(at, self.order, visitor, step, done, began, pool))

    def admit(self, second: int, count: int) -> None:
        for _ in range(count):
            self.visitors += 1
            noticed = second + self.rng.random() + self.rng.uniform(0, POLL_S)
            self._at(noticed + THINK_S, self.visitors, 0, False)

    def second(self, second: int) -> tuple[int, int, list[int], list[int], int]:
        """Runs [second, second + 1); (responses, errors, latency buckets,
        in-flight buckets, started)."""
        buckets = [0] * (len(BOUNDS_MS) + 1)
        responses = errors = started = 0

        def respond(ms: float, failed: bool) -> None:
            nonlocal responses, errors
            responses += 1
            errors += failed
            buckets[bisect.bisect_left(BOUNDS_MS, ms)] += 1

        def serve(request: Event, pool: Pool, now: float) -> None:
            pool.busy += 1
            self._at(now + WORK_MS / 1000, request.visitor, request.step, True, request.at, pool)

        def expire(now: float) -> None:
            for pool in self.pools:
                while pool.queue and now - pool.queue[0].at >= POOL_TIMEOUT_S:
                    late = pool.queue.popleft()
                    del self.flying[(late.visitor, late.step)]
                    respond(POOL_TIMEOUT_S * 1000, True)  # 503: the visitor leaves
                    self.record.served.append((late.at + POOL_TIMEOUT_S, POOL_TIMEOUT_S * 1000))

        while self.events and self.events[0].at < second + 1:
            event = heapq.heappop(self.events)
            expire(event.at)
            if not event.done:
                started += 1
                self.flying[(event.visitor, event.step)] = event.at
                pool = self.pools[-1]
                if pool.busy < pool.slots:
                    serve(event, pool, event.at)
                else:
                    pool.queue.append(event)
                continue
            began = self.flying.pop((event.visitor, event.step))
            ms = (event.at - began) * 1000
            respond(ms, False)
            self.record.served.append((event.at, ms))
            held = event.pool
            assert held is not None
            held.busy -= 1
            if held.queue and held.busy < held.slots:
                serve(held.queue.popleft(), held, event.at)
            if event.step == len(STEPS) - 1:
                self.record.purchases.append(event.at)
            else:
                self._at(event.at + THINK_S, event.visitor, event.step + 1, False)
        expire(second + 1)
        in_flight = [0] * (len(BOUNDS_MS) + 1)
        for began in self.flying.values():
            in_flight[bisect.bisect_left(BOUNDS_MS, (second + 1 - began) * 1000)] += 1
        return responses, errors, buckets, in_flight, started


def climb(rates: list[int], start: int, phase_seconds: int, every: int) -> list[int]:
    """The rate each second of a room that reaches each phase's ``rates`` as
    fast as the law can: a fall at once (as if it knew), a rise by doubling
    every ``every`` seconds, from ``start`` in the first phase and from the
    last phase's rate after it."""
    each, rate = [], start
    for wanted in rates:
        for second in range(phase_seconds):
            if rate > wanted:
                rate = wanted
            elif second and second % every == 0:
                rate = min(wanted, 2 * rate)
            each.append(rate)
    return each


async def simulate(
    redis_url: str,
    phases: list[int],
    phase_seconds: int,
    seed: int,
    fixed: list[int] | None = None,
    each_second: list[int] | None = None,
) -> Record:
    """One run: the adaptive room (neither ``fixed`` nor ``each_second``),
    fixed rates, one for each phase, set at its start (one rate for all:
    ``[rate]``), or a rate for each second."""
    seconds = phase_seconds * len(phases)
    if fixed:
        each_second = [fixed[min(second // phase_seconds, len(fixed) - 1)] for second in range(seconds)]
    rng = random.Random(seed)
    store = Store(connect(redis_url, 5.0), prefix=f"qgsim{time.time_ns()}")
    try:
        # Nobody polls in the model: the waiting count as alive for the run.
        room = Room(
            "sim",
            paths=["/shop/*"],
            rate=each_second[0] if each_second else START_RATE,
            per=1.0,
            abandon=3600.0,
            client_limit=0,
            target=None if each_second else Health(p95_ms=TARGET_MS, settle=SETTLE_S),
        )
        await store.stats(room, now=T0)
        keys = store.keys(room.name)
        await store.client.zadd(keys[1], {f"v{i}": i for i in range(LINE)})
        await store.client.zadd(keys[2], {f"v{i}": T0 for i in range(LINE)})
        backend = Backend(phases[0], rng)
        admitted = 0
        for second in range(seconds):
            backend.resize(phases[second // phase_seconds])
            if each_second and second and each_second[second] != each_second[second - 1]:
                await store.configure(room, rate=each_second[second], now=T0 + second * 1000)
            stats = await store.stats(room, now=T0 + second * 1000)
            backend.record.rates.append(int(stats["rate"]))
            backend.record.looks.append(f"{stats.get('p95_ms')} {stats.get('health_reason')}")
            backend.admit(second, int(stats["admitted"]) - admitted)  # whom the line let in
            admitted = int(stats["admitted"])
            responses, errors, buckets, in_flight, started = backend.second(second)
            if responses and not each_second:
                now = T0 + second * 1000 + 999
                await store.report(room, responses, errors, buckets, buckets, in_flight, started, now=now)
        backend.record.requests = backend.record.served
        return backend.record
    finally:
        await store.aclose()


def figures(records: list[Record], index: int, seconds: int, warm: float = 0.0) -> dict[str, Any]:
    """Phase ``index``'s figures, the mean over the runs, and each run's
    goodput (``goodput_each``)."""
    each = [phase_figures(record, index, seconds, warm) for record in records]
    mean: dict[str, Any] = {key: round(statistics.mean(f[key] for f in each), 3) for key in each[0]}
    mean["goodput_each"] = [f["goodput_per_s"] for f in each]
    return mean


async def sweep(redis_url: str, slots: int, seconds: int, seeds: int) -> dict[str, Any]:
    """The best fixed rate for ``slots`` alone: highest mean goodput with
    the p95 over the target at most 10 % of the time after a warm-up of a
    third (the real benchmark's oracle)."""
    most = slots * 1000 / WORK_MS / len(STEPS)
    tried = []
    for rate in sorted({max(1, round(most * share)) for share in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)}):
        runs = [await simulate(redis_url, [slots], seconds, seed, fixed=[rate]) for seed in range(seeds)]
        mean = figures(runs, 0, seconds, warm=seconds / 3)
        tried.append({"rate": rate, **{k: mean[k] for k in ("goodput_per_s", "above_target_share")}})
    fine = [t for t in tried if t["above_target_share"] <= 0.10] or tried
    return max(fine, key=lambda t: t["goodput_per_s"])


async def report(redis_url: str, seeds: int, seconds: int, trace: bool) -> dict[str, Any]:
    phases = list(PHASES)
    oracles = [await sweep(redis_url, slots, seconds, seeds) for slots in phases]
    schedule = [o["rate"] for o in oracles]
    climbing = climb(schedule, START_RATE, seconds, round(SETTLE_S / 2))
    runs = {
        # Each phase's oracle rate from its start: what no controller of
        # admissions can beat at a change (the visitors admitted before
        # it still come).
        "oracle_schedule": [await simulate(redis_url, phases, seconds, s, schedule) for s in range(seeds)],
        # The same rates reached as fast as the law raises (x2 each half
        # round trip), a fall taken at once: what the law's pace allows.
        "oracle_climb": [
            await simulate(redis_url, phases, seconds, s, each_second=climbing) for s in range(seeds)
        ],
        "adaptive": [await simulate(redis_url, phases, seconds, s) for s in range(seeds)],
    }
    if trace:
        record = runs["adaptive"][0]
        for second, (rate, look) in enumerate(zip(record.rates, record.looks, strict=True)):
            print(second, rate, look)
    result: dict[str, Any] = {"seeds": seeds, "phase_seconds": seconds}
    for name, records in runs.items():
        rows = []
        for index, slots in enumerate(phases):
            mean = figures(records, index, seconds)
            per_run = mean["goodput_each"]
            best = oracles[index]["goodput_per_s"]
            rows.append(
                {
                    "slots": slots,
                    "oracle_rate": oracles[index]["rate"],
                    "goodput_vs_oracle": round(mean["goodput_per_s"] / max(best, 0.01), 3),
                    "goodput_vs_oracle_range": [round(min(per_run) / best, 3), round(max(per_run) / best, 3)],
                    "above_target_share": mean["above_target_share"],
                    "settle_seconds": mean["settle_seconds"],
                }
            )
        result[name] = rows
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.adaptive_sim", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--phase-seconds", type=int, default=60)
    parser.add_argument("--trace", action="store_true", help="the first run's rate and reason, each second")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with EmbeddedServer(server_binary("path")) as server:
        result = asyncio.run(report(server.url, args.seeds, args.phase_seconds, args.trace))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"target p95 {TARGET_MS} ms; phases of {args.phase_seconds} s; means of {args.seeds} seeds")
    heads = ("phase", "run", "oracle rate", "vs oracle", "(range)", "p95>target", "settle s")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (6, 15, 11, 10, 13, 11, 9), strict=True)))
    for index in range(len(PHASES)):
        for name in RUNS:
            row = result[name][index]
            low, high = row["goodput_vs_oracle_range"]
            label = f"{index + 1} ({row['slots']})" if name == "oracle_schedule" else ""
            spread = f"{low:.2f}-{high:.2f}"
            print(
                f"{label:>6} {name:>15} {row['oracle_rate']:>11} {row['goodput_vs_oracle']:>10.3f} "
                f"{spread:>13} {row['above_target_share']:>11.1%} {row['settle_seconds']:>9.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
