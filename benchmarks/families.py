"""The health-following room judged over families of backends, in simulated
time: the plants of ``benchmarks.plants`` (a pool past its knee, latency
rising smoothly, a heavy tail at any load, fast 503s, a heavy request tens
of seconds after admission with and without the light pages measured,
load the gate does not see, slow drift, a target out of reach, a queue
held 10-30 s then 504s, an outage fast or silent, an autoscaled pool,
cold caches at the start, pauses at any load), each with
its parameters drawn per seed, against the controller itself
(``queuegate/scripts/health.lua``) run in a real Redis on simulated clocks.

    python -m benchmarks.families [--seeds 16] [--phase-seconds 120]
        [--family NAME ...] [--trace FAMILY:SEED] [--json] [--oracles FILE]
        [--per SECONDS]

Each family runs in three phases of capacity (for most: as drawn, then
30-50 % of it, then 130-180 %; an outage comes in the second phase).
Each phase's oracle is the best fixed rate for that phase alone in the
same plant and seed: a sweep of fixed rates, each run long enough for
its visits to reach a steady state, the highest goodput (purchases:
visits whose every request succeeded within 3 s) among those that meet
the room's targets: the p95 over the target, and the error share over its
maximum, each at most 10 % of the seconds (where no rate meets them, the
best goodput). Printed per family
and phase, over the seeds: goodput against the oracle (mean and worst
seed), the share of seconds whose p95 is over the target, the share whose
error rate is over its maximum, the highest rate against the oracle's
(this phase's or the last one's, whichever is higher), direction changes
of the rate a minute in the phase's second half, and the time to reach
the oracle's rate (within a fifth); for a target out of reach, when it
was named. A law is judged by its worst family.

``--per``: the room counts its rate per that many seconds (its rate from
code 5 a second, its floor the default); the rates printed are a second.
The oracles are the same.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queuegate import Health, Room
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import Store, connect

from .adaptive import p95_per_second
from .plants import FAMILIES, Plant, capacity_rate, make_plant

T0 = 1_900_000_000_000  # ms: the simulated clock's start
LINE = 120_000  # visitors waiting at the start: more than any run admits (180 a second for 10 min)
START_RATE = 5  # the adaptive room's rate at the start
# s into a phase at which a probe past the last overload finds a grown
# capacity, on average: probes come once a minute at most (each that fails
# turns the rate twice, and the target allows two turns a minute), at
# moments unrelated to the app's growth.
FOUND_AFTER_S = 30
SETTLE_S = 6.0
MAX_ERRORS = 0.02
SWEEP = (0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25)  # shares of the plant's capacity
MAX_VISIT_S = 70  # the longest visit of any family: a fixed rate's warm-up


@dataclass
class Run:
    plant: Plant
    target_ms: float
    rates: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)  # visitors let in, each second


async def simulate(
    redis_url: str | None,
    family: str,
    seed: int,
    phase_seconds: int,
    fixed: list[int] | None = None,
    *,
    floor: int | None = None,
    ceiling: int | None = None,
    pins: dict[int, int | None] | None = None,
    settle: float = SETTLE_S,
    per: float = 1.0,
    changes: dict[int, dict[str, Any]] | None = None,
) -> Run:
    """One run of ``family``'s plant for ``seed``: the adaptive room, or a
    fixed rate for each second (``fixed``; no Redis needed). ``floor`` and
    ``ceiling`` bound the room; ``pins``: at a second, the operator pins the
    rate (a number) or gives it back to the controller (None); ``settle``:
    the room's ``Health.settle`` (s); ``per``: the room's interval (s), its
    rate from code ``START_RATE`` a second (the run's rates are a second,
    its floor and ceiling in the room's own units, per ``per``);
    ``changes``: at a second, an operator's change (``Store.configure``'s
    keywords, e.g. ``{"rate": 5, "per": 1.0}``)."""
    plant, target, extra = make_plant(family, seed, phase_seconds)
    run = Run(plant, target)
    # A plant the room can never load comes with the most visitors who
    # come a second: the room's ceiling, as an operator would set it.
    if "max_rate" in extra:
        most = int(extra["max_rate"])  # type: ignore[call-overload]
        ceiling = most if ceiling is None else min(ceiling, most)
    seconds = phase_seconds * len(plant.phases) if fixed is None else len(fixed)
    if fixed is not None:
        for second in range(seconds):
            run.rates.append(fixed[second])
            run.admitted.append(fixed[second])
            plant.admit(second, fixed[second])
            plant.second(second)
        return run
    assert redis_url is not None
    store = Store(connect(redis_url, 5.0), prefix=f"qgsim{time.time_ns()}")
    try:
        # Nobody polls in the model: the waiting count as alive for the run.
        room = Room(
            "sim",
            paths=["/shop/*"],
            rate=round(START_RATE * per),
            per=per,
            abandon=3600.0,
            client_limit=0,
            target=Health(
                p95_ms=target, settle=settle, max_error_rate=MAX_ERRORS, floor=floor, ceiling=ceiling
            ),
        )
        await store.stats(room, now=T0)
        keys = store.keys(room.name)
        await store.client.zadd(keys[1], {f"v{i}": i for i in range(LINE)})
        await store.client.zadd(keys[2], {f"v{i}": T0 for i in range(LINE)})
        admitted = 0
        for second in range(seconds):
            if pins and second in pins:
                pin = pins[second]
                if pin is None:
                    await store.configure(room, pinned=None, now=T0 + second * 1000)
                else:
                    await store.configure(room, rate=pin, now=T0 + second * 1000)
            if changes and second in changes:
                await store.configure(room, **changes[second], now=T0 + second * 1000)
            stats = await store.stats(room, now=T0 + second * 1000)
            run.rates.append(round(int(stats["rate"]) * 1000 / int(stats["per"])))
            run.reasons.append(f"{stats.get('p95_ms')} {stats.get('health_reason')}")
            run.admitted.append(int(stats["admitted"]) - admitted)
            plant.admit(second, run.admitted[-1])  # whom the line let in
            admitted = int(stats["admitted"])
            report = plant.second(second)
            if report.responses or report.started:
                now = T0 + second * 1000 + 999
                await store.report(
                    room,
                    report.responses,
                    report.errors,
                    report.buckets,
                    report.buckets,
                    report.in_flight,
                    report.started,
                    visits=report.visits,
                    now=now,
                )
        return run
    finally:
        await store.aclose()


def phase_figures(run: Run, start: int, end: int) -> dict[str, float]:
    plant = run.plant
    p95s = p95_per_second(plant.served, start, end, empty=None)
    errors: dict[int, list[int]] = {}
    for at, failed in plant.outcomes:
        if start <= at < end:
            errors.setdefault(int(at), [0, 0])[failed] += 1
    error_seconds = [fails / (fails + ok) > MAX_ERRORS for ok, fails in errors.values()]
    return {
        "goodput": sum(start <= t < end for t in plant.purchases) / (end - start),
        "over_target": sum(p > run.target_ms for p in p95s) / max(1, len(p95s)),
        "over_errors": sum(error_seconds) / max(1, len(error_seconds)),
    }


def oracle(family: str, seed: int, phase: int, phase_seconds: int) -> dict[str, float]:
    """The best fixed rate for ``phase`` alone: each rate run for a warm-up
    (visits reach a steady state) and the phase's length, judged on the
    latter."""
    plant, _, extra = make_plant(family, seed, phase_seconds)
    share = plant.phases[phase]
    ceiling = float(extra.get("max_rate", 0))  # type: ignore[arg-type]
    most = ceiling or capacity_rate(plant, share)
    warm = max(phase_seconds // 3, MAX_VISIT_S)
    tried = []
    rates = {max(1, round(most * s)) for s in SWEEP}
    if ceiling:
        # The room's ceiling bounds every rate, the oracle's too.
        rates = {min(rate, round(ceiling)) for rate in rates}
    for rate in sorted(rates):
        # The whole run at this phase's capacity: phases of `warm + phase_seconds`.
        run = _steady(family, seed, phase, rate, warm + phase_seconds, phase * phase_seconds - warm, plant)
        figures = phase_figures(run, warm, warm + phase_seconds)
        tried.append({"rate": rate, **figures})
    fine = [t for t in tried if t["over_target"] <= 0.10 and t["over_errors"] <= 0.10] or tried
    return max(fine, key=lambda t: t["goodput"])


def _steady(family: str, seed: int, phase: int, rate: int, seconds: int, offset: int, like: Plant) -> Run:
    """``rate`` for ``seconds`` at ``phase``'s capacity, its background
    load, outages and cold caches as in the phase of ``like`` (second 0
    here is ``offset`` there)."""
    plant, target, _ = make_plant(family, seed, seconds)
    plant.phases = [plant.phases[phase]]
    plant.down, plant.down_hang_s, plant.clock = like.down, like.down_hang_s, offset
    background = plant.background
    if background is not None:
        plant.background = lambda second: background(second + offset)
    if plant.share is not None:
        level = plant.share(phase * seconds // 3 + seconds // 2)
        plant.share = lambda second: level
    run = Run(plant, target)
    for second in range(seconds):
        run.rates.append(rate)
        plant.admit(second, rate)
        plant.second(second)
    return run


def visit_seconds(plant: Plant) -> float:
    """About how long after admission a visit's last request ends (s): the
    soonest its load has all come."""
    rng = random.Random(0)
    lengths = [sum(step.after(rng) for step in plant.visit) + 1.0 for _ in range(200)]
    return statistics.mean(lengths)


def climb(
    oracles: list[dict[str, float]], visit_s: float, phase_seconds: int, found_after: int = 0
) -> list[int]:
    """The fastest schedule the safety rule allows a room that knows each
    phase's oracle: a fall taken at once, a rise never past twice what was
    admitted a visit's length before (the load that shows the room to grow
    comes a visit after the admissions that bring it).

    With ``found_after``, a rise over the phase before's oracle is found
    only that many seconds into the phase (before it, the room holds at the
    phase before's oracle): a room that has no sign of a grown capacity but
    a probe past its last overload, which it may make once a minute at most
    and still turn its rate no more than twice a minute."""
    rates: list[int] = []
    for index, best in enumerate(oracles):
        grown = index > 0 and best["rate"] > oracles[index - 1]["rate"]
        for second in range(phase_seconds):
            back = len(rates) - round(visit_s)
            shown = rates[back] if back >= 0 else START_RATE
            goal = round(best["rate"])
            if grown and second < found_after:
                goal = round(oracles[index - 1]["rate"])
            rates.append(max(1, min(goal, 2 * shown)))
    return rates


async def unavoidable_over(
    family: str, seed: int, phase_seconds: int, schedule: list[int], phase: int
) -> float:
    """The share of ``phase``'s seconds over the target that no room avoids
    once it has admitted ``schedule`` up to the phase: then nobody more (but
    the floor's one a second). The visitors a fall finds inside still
    come."""
    start, end = phase * phase_seconds, (phase + 1) * phase_seconds
    stopped = await simulate(None, family, seed, phase_seconds, fixed=schedule[:start] + [1] * (end - start))
    return phase_figures(stopped, start, end)["over_target"]


def judge(run: Run, oracles: list[dict[str, float]], phase_seconds: int) -> list[dict[str, float]]:
    rows = []
    for index, best in enumerate(oracles):
        start, end = index * phase_seconds, (index + 1) * phase_seconds
        figures = phase_figures(run, start, end)
        rates = run.rates[start:end]
        before = oracles[index - 1]["rate"] if index else best["rate"]
        late = rates[len(rates) // 2 :]
        steps = [b - a for a, b in itertools.pairwise(late) if b != a]
        turns = sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0))
        reach = next(
            (i for i, r in enumerate(rates) if 0.8 * best["rate"] <= r <= 1.25 * best["rate"]), phase_seconds
        )
        named = next((i for i, reason in enumerate(run.reasons[start:end]) if "out of reach" in reason), None)
        rows.append(
            {
                "goodput_vs_oracle": figures["goodput"] / max(best["goodput"], 0.01),
                "over_target": figures["over_target"],
                "over_errors": figures["over_errors"],
                "max_rate_vs_oracle": max(rates) / max(best["rate"], before),
                "turns_per_minute": turns / max(1, len(late)) * 60,
                "reach_s": reach,
                "named_s": -1 if named is None else named,
                "oracle_rate": best["rate"],
            }
        )
    return rows


def cached_oracle(
    cache: dict[str, dict[str, float]] | None, family: str, seed: int, phase: int, phase_seconds: int
) -> dict[str, float]:
    """``oracle``, kept in ``cache`` (the oracles do not depend on the law:
    ``--oracles FILE`` sweeps them once for any number of runs of it)."""
    if cache is None:
        return oracle(family, seed, phase, phase_seconds)
    key = f"{family}:{seed}:{phase}:{phase_seconds}"
    if key not in cache:
        cache[key] = oracle(family, seed, phase, phase_seconds)
    return cache[key]


async def family_report(
    redis_url: str,
    family: str,
    seeds: int,
    phase_seconds: int,
    cache: dict[str, dict[str, float]] | None = None,
    per: float = 1.0,
) -> dict[str, Any]:
    per_seed = []
    for seed in range(seeds):
        oracles = [cached_oracle(cache, family, seed, phase, phase_seconds) for phase in range(3)]
        run = await simulate(redis_url, family, seed, phase_seconds, per=per)
        rows = judge(run, oracles, phase_seconds)
        schedule = climb(oracles, visit_seconds(run.plant), phase_seconds)
        climbed = await simulate(None, family, seed, phase_seconds, fixed=schedule)
        probed = climb(oracles, visit_seconds(run.plant), phase_seconds, FOUND_AFTER_S)
        found = climbed
        if probed != schedule:
            found = await simulate(None, family, seed, phase_seconds, fixed=probed)
        for index, (row, best) in enumerate(zip(rows, oracles, strict=True)):
            start, end = index * phase_seconds, (index + 1) * phase_seconds
            figures = phase_figures(climbed, start, end)
            row["bound"] = figures["goodput"] / max(best["goodput"], 0.01)
            row["probe_bound"] = phase_figures(found, start, end)["goodput"] / max(best["goodput"], 0.01)
            row["over_bound"] = await unavoidable_over(family, seed, phase_seconds, run.admitted, index)
        per_seed.append(rows)
    phases = []
    for index in range(3):
        rows = [seed_rows[index] for seed_rows in per_seed]
        phases.append(
            {
                "goodput_vs_oracle": round(statistics.mean(r["goodput_vs_oracle"] for r in rows), 3),
                "goodput_vs_oracle_worst": round(min(r["goodput_vs_oracle"] for r in rows), 3),
                "climb_bound": round(statistics.mean(r["bound"] for r in rows), 3),
                "probe_bound": round(statistics.mean(r["probe_bound"] for r in rows), 3),
                "over_target": round(statistics.mean(r["over_target"] for r in rows), 3),
                "over_target_bound": round(statistics.mean(r["over_bound"] for r in rows), 3),
                "over_errors": round(statistics.mean(r["over_errors"] for r in rows), 3),
                "max_rate_vs_oracle": round(max(r["max_rate_vs_oracle"] for r in rows), 2),
                "turns_per_minute": round(statistics.mean(r["turns_per_minute"] for r in rows), 2),
                "reach_s": round(statistics.mean(r["reach_s"] for r in rows), 1),
                "named_s": max(r["named_s"] for r in rows) if index == 0 else -1,
                "oracle_rate": round(statistics.mean(r["oracle_rate"] for r in rows), 1),
            }
        )
    return {"family": family, "about": FAMILIES[family].about, "phases": phases}


def print_table(results: list[dict[str, Any]], seeds: int, phase_seconds: int) -> None:
    """The report as a table (``python -c`` it over a ``--json`` run's families)."""
    about = f"{seeds} seeds a family, phases of {phase_seconds} s"
    print(f"{about}; goodput against each phase's best fixed rate")
    print(
        "(bound: the goodput of the fastest climb the safety rule allows, knowing each"
        " phase's oracle: twice what was admitted a visit before; probed: the same, a grown"
        f" capacity found {FOUND_AFTER_S} s into its phase, as by probes once a minute;"
        " p95>tgt's bound: the seconds over the target had the room admitted one a second"
        " from the phase's start)"
    )
    heads = (
        "family",
        "ph",
        "oracle/s",
        "goodput",
        "worst",
        "bound",
        "probed",
        "p95>tgt",
        "bound",
        "err>max",
        "max rate",
        "turns/min",
        "reach s",
    )
    widths = (22, 3, 8, 8, 7, 6, 6, 8, 6, 8, 9, 10, 8)
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True)))
    for result in results:
        for index, row in enumerate(result["phases"]):
            label = result["family"] if index == 0 else ""
            cells = (
                label,
                index + 1,
                f"{row['oracle_rate']:.1f}",
                f"{row['goodput_vs_oracle']:.2f}",
                f"{row['goodput_vs_oracle_worst']:.2f}",
                f"{row['climb_bound']:.2f}",
                f"{row.get('probe_bound', row['climb_bound']):.2f}",
                f"{row['over_target']:.0%}",
                f"{row.get('over_target_bound', 0):.0%}",
                f"{row['over_errors']:.0%}",
                f"{row['max_rate_vs_oracle']:.2f}x",
                f"{row['turns_per_minute']:.1f}",
                f"{row['reach_s']:.0f}",
            )
            print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
        named = result["phases"][0]["named_s"]
        if result["family"] == "unreachable":
            print(f"{'':>22} target out of reach named after {named} s at the latest (-1: never)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.families", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--phase-seconds", type=int, default=120)
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="(default: all)")
    parser.add_argument("--trace", metavar="FAMILY:SEED", help="one run's rate and reason, each second")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--per", type=float, default=1.0, help="the room's interval, s (its rate from code: 5 a second)"
    )
    parser.add_argument(
        "--oracles", metavar="FILE", type=Path, help="keep the oracles' sweeps in FILE (JSON) and reuse them"
    )
    args = parser.parse_args(argv)
    families = args.family or list(FAMILIES)
    cache: dict[str, dict[str, float]] | None = None
    if args.oracles:
        cache = json.loads(args.oracles.read_text()) if args.oracles.exists() else {}
    with EmbeddedServer(server_binary("path")) as server:
        if args.trace:
            name, _, seed = args.trace.partition(":")
            run = asyncio.run(simulate(server.url, name, int(seed or 0), args.phase_seconds, per=args.per))
            for second, (rate, reason) in enumerate(zip(run.rates, run.reasons, strict=True)):
                print(second, rate, reason)
            return 0
        results = []
        for name in families:
            report = family_report(server.url, name, args.seeds, args.phase_seconds, cache, args.per)
            results.append(asyncio.run(report))
            if args.oracles:
                args.oracles.write_text(json.dumps(cache))
    if args.json:
        print(json.dumps({"seeds": args.seeds, "phase_seconds": args.phase_seconds, "families": results}))
        return 0
    print_table(results, args.seeds, args.phase_seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
