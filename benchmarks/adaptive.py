"""Admission that follows the app's health, against fixed rates, on the same
arrivals.

    python -m benchmarks.adaptive [--phase-seconds 60] [--quick] [--inherited] [--delayed] [--json]

The backend: three gated pages (``/shop/browse``, ``/shop/cart``,
``/shop/pay``) whose work is one of ``slots`` places of WORK_MS each (an
``asyncio.Semaphore``: latency climbs as a queue forms; a request that waits
POOL_TIMEOUT_S for a place fails with 503, as with a database pool). Its capacity changes
in three phases: 8 slots, then 3, then 12 (32, 12 and 48 requests a second).
Virtual visitors arrive at ARRIVALS a second (Poisson, the same seeded
arrivals in every run), join the room's line, poll as the page does (giving
up after PATIENCE_S), and
once in make three requests (browse, cart, pay) THINK_S apart; a request
slower than REQUEST_TIMEOUT_S loses the purchase. A purchase is goodput.
The latency judged against the target is the server's: from the moment
uvicorn hands a request to the app (outside the gate) to the response's
end. The load generator shares the machine's cores, and its own stalls (a
thousand waiting visitors polling from one Python process) would otherwise
read as the app's latency; they still cost purchases. The visitors' own
p95 is reported beside it.

Runs, each in a fresh uvicorn worker and Redis: the adaptive room
(``Health(p95_ms=TARGET_MS)``, starting at 5 a second); a fixed rate too high
and one too low; and, for each phase alone, a sweep of fixed rates, whose
best goodput with the p95 over target at most 10 % of the time is the
phase's oracle (what a load test would pick); then the oracles' rates, each
set at its phase's start (the "oracle schedule": an operator who knew each
change the moment it came; what it loses at a change, no controller of
admissions can win back). Reported per phase: goodput
against the oracle, the share of seconds whose p95 is over the target, and
the settling time (from the change until the p95 stays under the target and
the rate stays within 20 % of where it ends the phase).

With ``--inherited``, a second oracle per phase: the same sweep, each rate
run after the phases before it at their oracles' rates, so that it faces
the line those leave (thousands polling the same worker) as the adaptive
room does; ``goodput_vs_inherited_oracle`` is reported beside
``goodput_vs_oracle``, which stays the issue's measure.

With ``--delayed``, the visit of a real shop (issue 37): once in, a visitor
makes the light pages (browse, cart: LIGHT_MS each, no slot, gated and
measured as the others) THINK_S apart, and the heavy one (pay: a slot for
WORK_MS) DELAYS_S after admission (drawn per visitor from a seed of its
own, the same in every run), so the load an admission brings comes tens of
seconds after it. The slots serve 4 purchases a second each (32, 12 and 48
visitors a second). Phases are 180 s (90 with ``--quick``), and each
oracle's rate is judged after a warm-up of at least the longest delay and
10 s, once the heavy requests of its admissions have come.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from typing import Any

import httpx
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from queuegate import Health, QueueGate, Room
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import Store, connect

# (The figures' names that the simulations and tests import from here.)
from .adaptive_report import TARGET_MS as TARGET_MS
from .adaptive_report import Record as Record
from .adaptive_report import best_of, print_table, reported
from .adaptive_report import p95_per_second as p95_per_second
from .adaptive_report import phase_figures as phase_figures
from .loadgen import Browser
from .speed import uvicorn_server

WORK_MS = 250
PHASES = (8, 3, 12)  # slots: 32, 12, 48 requests a second (10.7, 4 and 16 visitors)
ARRIVALS = 20.0  # visitors a second
THINK_S = 0.3
REQUEST_TIMEOUT_S = 3.0
POOL_TIMEOUT_S = 2.0
POLL_S = 0.5
# Visitors wait up to PATIENCE_S, longer than any wait in a run. Once the
# wait outgrows the visitors' patience, the front of a FIFO line is all
# people who already left (a room skips them only after `abandon` of
# silence), the room admits them in vain and every rate buys nothing: with
# a patience of 60 s, the 60 s phases bought nothing in phase 3, whatever
# the rate. Those who do give up are skipped after ABANDON_S of silence (a
# waiting visitor polls at least every 20 s).
PATIENCE_S = 300.0
SETTLE_S = 6.0
START_RATE = 5  # the adaptive room's rate at the start
STEPS = ("browse", "cart", "pay")
# --delayed: pay comes DELAYS_S after admission; browse and cart are light.
DELAYS_S = (10.0, 50.0)
LIGHT_MS = 20
DELAYED_WARM_S = DELAYS_S[1] + 10  # an oracle's warm-up: its heavy load has come
VISIT = "QGDEV_BENCH_VISIT"  # "delayed" in the uvicorn worker's environment
ABANDON_S = 30.0
ROOM_SETTINGS: dict[str, Any] = {"per": 1.0, "client_limit": 0, "abandon": ABANDON_S}
JSON = "application/json"
ROOM = "adaptive"
REACHED = "bench.reached"  # set on a request's scope by the backend


# -- the server side (in the uvicorn worker) ---------------------------------


class Timed:
    """Outermost: the time of each page request that reached the backend,
    from the server handing it to the app (the gate included) to the
    response's end. A waiting room's answer is not the backend's latency."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log: list[tuple[float, float]] = []  # (wall clock at the end, ms)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/shop/"):
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            if scope.get(REACHED):
                self.log.append((time.time(), (time.perf_counter() - began) * 1000))


class Backend:
    """Pages whose work takes one of ``slots`` places for WORK_MS (with
    ``delayed``, only pay's: the others are light)."""

    def __init__(self, delayed: bool = False) -> None:
        self.slots = asyncio.Semaphore(PHASES[0])
        self.delayed = delayed

    async def page(self, request: Request) -> PlainTextResponse:
        request.scope[REACHED] = True
        if self.delayed and request.path_params.get("step") != "pay":
            await asyncio.sleep(LIGHT_MS / 1000)
            return PlainTextResponse("ok")
        # Like a database pool: a request that waits POOL_TIMEOUT_S for a
        # slot fails (503) instead of queueing without bound.
        slots = self.slots
        try:
            await asyncio.wait_for(slots.acquire(), POOL_TIMEOUT_S)
        except TimeoutError:
            return PlainTextResponse("busy", status_code=503)
        try:
            await asyncio.sleep(WORK_MS / 1000)
        finally:
            slots.release()
        return PlainTextResponse("ok")

    async def set_slots(self, request: Request) -> PlainTextResponse:
        # Requests holding the old semaphore finish on it; new ones queue here.
        self.slots = asyncio.Semaphore(int(request.path_params["n"]))
        return PlainTextResponse("ok")


def make_app() -> ASGIApp:
    mode = os.environ.get("QGDEV_BENCH_MODE", "adaptive")
    backend = Backend(delayed=os.environ.get(VISIT) == "delayed")
    timed: Timed

    async def latencies(request: Request) -> JSONResponse:
        return JSONResponse(timed.log)

    routes = [
        Route("/shop/{step}", backend.page),
        Route("/bench/slots/{n:int}", backend.set_slots, methods=["POST"]),
        Route("/bench/latencies", latencies),
        Route("/page", backend.page),
    ]
    if mode == "adaptive":
        # settle: a visit here lasts a second or two, plus the page's polling.
        target = Health(p95_ms=TARGET_MS, settle=SETTLE_S)
        room = Room(ROOM, paths=["/shop/*"], rate=START_RATE, target=target, **ROOM_SETTINGS)
    else:
        room = Room(ROOM, paths=["/shop/*"], rate=int(mode), **ROOM_SETTINGS)
    timed = Timed(
        QueueGate(
            Starlette(routes=routes),
            rooms=[room],
            secret_key="benchmark-secret-key-0123456789",
            redis=os.environ["QUEUEGATE_REDIS_URL"],
            prefix=os.environ.get("QGDEV_BENCH_PREFIX", "qg"),
            cookie_secure=False,
            timeout=2.0,
        )
    )
    return timed


app: ASGIApp | None = make_app() if "QUEUEGATE_REDIS_URL" in os.environ else None


# -- the visitors (in this process) --------------------------------------------


async def visitor(port: int, record: Record, stop: float, delay: float | None = None) -> None:
    """One visit; with a ``delay``, pay comes that long after admission."""
    # A connection of its own, as a browser tab has, from a client that
    # costs little CPU: with httpx, the load generator spent a whole core on
    # a long line's polls in phase 3, and its stalls reached the pool as
    # bursts that only a controller reacts to.
    browser = Browser(port)

    async def get(path: str, accept: str = "*/*") -> tuple[int, bytes]:
        try:
            return await asyncio.wait_for(browser.get(path, accept), REQUEST_TIMEOUT_S)
        except TimeoutError:
            browser.close()  # the answer may still come: not on this connection
            raise

    try:
        status, body = await get("/shop/browse", JSON)
        if status != 200:
            answer = json.loads(body)
            gives_up = time.monotonic() + PATIENCE_S
            while answer.get("state") in ("waiting", "prequeue"):
                # The page's stream tells a visitor near the front (fewer than
                # 20 ahead) at once, and one further back at the poll interval
                # the gate gives: polling like that stands in for it here.
                pause = float(answer.get("poll_after_seconds", 1))
                if (answer.get("ahead") or 0) < 20:
                    pause = min(pause, POLL_S)
                if time.monotonic() + pause > min(stop, gives_up):
                    return  # the run ends, or the visitor gives up waiting
                await asyncio.sleep(pause)
                answer = json.loads((await get(answer["status_url"], JSON))[1])
            if answer.get("state") != "active":
                return
        admitted = time.monotonic()
        for step in STEPS if status != 200 else STEPS[1:]:
            pause = THINK_S
            if delay is not None and step == "pay":
                pause = max(THINK_S, admitted + delay - time.monotonic())
            await asyncio.sleep(pause)
            began = time.monotonic()
            try:
                status, _ = await get(f"/shop/{step}")
            except TimeoutError:
                record.requests.append((time.monotonic() - record.started, REQUEST_TIMEOUT_S * 1000))
                return  # too slow: the visitor leaves, nothing bought
            done = time.monotonic()
            record.requests.append((done - record.started, (done - began) * 1000))
            if status != 200:
                return
        record.purchases.append(time.monotonic() - record.started)
    except (OSError, TimeoutError, ValueError):
        return
    finally:
        browser.close()


async def drive(
    port: int,
    redis_url: str,
    prefix: str,
    phases: list[int],
    phase_seconds: float,
    schedule: list[int] | None = None,
    delayed: bool = False,
) -> Record:
    """The same seeded arrivals (and delays) for every run; the phases'
    slots set on time (and with a ``schedule``, the room's rate for each
    phase, at its start)."""
    rng = random.Random(7)
    delays = random.Random(11)  # apart, so that the arrivals stay the same
    record = Record(started=time.monotonic(), started_wall=time.time())
    stop = record.started + phase_seconds * len(phases)
    store = Store(connect(redis_url, 5.0), prefix=prefix)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as control:

        async def phases_and_rates() -> None:
            # One sample at the start of each second: rates[s] is second s.
            # Each change comes at its phase's first second (after the last
            # sample of the phase before, a second early: its first second
            # went to the phase before's figures).
            for index, slots in enumerate(phases):
                await asyncio.sleep(max(0.0, record.started + phase_seconds * index - time.monotonic()))
                await control.post(f"/bench/slots/{slots}")
                if schedule is not None and index > 0:
                    await store.configure(ROOM, rate=schedule[index])
                while len(record.rates) < round(phase_seconds * (index + 1)):
                    await asyncio.sleep(max(0.0, record.started + len(record.rates) - time.monotonic()))
                    try:
                        stats = await store.stats(ROOM)
                        record.rates.append(int(stats["rate"]))
                        look = f"{stats.get('p95_ms')} n={stats.get('samples')} {stats.get('health_reason')}"
                    except Exception as exc:
                        record.rates.append(record.rates[-1] if record.rates else 0)
                        look = f"stats failed: {exc!r}"
                    record.looks.append(look)

        tasks = [asyncio.create_task(phases_and_rates())]
        at = record.started
        while True:
            at += rng.expovariate(ARRIVALS)
            if at >= stop:
                break
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            delay = delays.uniform(*DELAYS_S) if delayed else None
            tasks.append(asyncio.create_task(visitor(port, record, stop, delay)))
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log = (await control.get("/bench/latencies", timeout=30)).json()
        record.served = [(end - record.started_wall, ms) for end, ms in log]
    await store.aclose()
    return record


def run(
    mode: str,
    phases: list[int],
    phase_seconds: float,
    schedule: list[int] | None = None,
    delayed: bool = False,
) -> Record:
    with EmbeddedServer(server_binary("path")) as server:
        prefix = f"qg{time.time_ns()}"
        env = {"QGDEV_BENCH_PREFIX": prefix, VISIT: "delayed" if delayed else "shop"}
        with uvicorn_server(mode, server.url, app="benchmarks.adaptive:app", env=env) as served:
            return uvloop.run(
                drive(served.port, server.url, prefix, phases, phase_seconds, schedule, delayed)
            )


# -- the oracles: sweeps of fixed rates ----------------------------------------


def oracle(slots: int, phase_seconds: float, rates: list[int], delayed: bool = False) -> dict[str, Any]:
    """The best fixed rate for ``slots`` alone: highest goodput with the p95
    over target at most 10 % of the time (after a warm-up of a third, and
    with ``delayed`` of at least DELAYED_WARM_S)."""
    tried = []
    warm = max(phase_seconds / 3, DELAYED_WARM_S if delayed else 0.0)
    for rate in rates:
        record = run(str(rate), [slots], phase_seconds, delayed=delayed)
        figures = phase_figures(record, 0, phase_seconds, warm=warm)
        tried.append({"rate": rate, **figures})
    return best_of(tried)


def inherited_oracle(
    index: int,
    phases: list[int],
    phase_seconds: float,
    schedule: list[int],
    rates: list[int],
    delayed: bool = False,
) -> dict[str, Any]:
    """The best fixed rate for phase ``index`` in the run's own context: the
    phases before it at their oracles' rates (the line they leave, the
    visitors they admitted), then each rate of the sweep from the phase's
    start, measured over the whole phase as the adaptive room is (no
    warm-up). Highest goodput with the p95 over target at most 10 % of the
    time."""
    tried = []
    for rate in rates:
        rates_here = [*schedule[:index], rate]
        record = run(str(rates_here[0]), phases[: index + 1], phase_seconds, rates_here, delayed)
        tried.append({"rate": rate, **phase_figures(record, index, phase_seconds)})
    return best_of(tried)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.adaptive", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--phase-seconds", type=float, help="60 (--delayed: 180)")
    parser.add_argument(
        "--quick", action="store_true", help="30 s phases (--delayed: 90) and a shorter sweep"
    )
    parser.add_argument(
        "--delayed",
        action="store_true",
        help=f"light pages, then the heavy one {DELAYS_S[0]:g}-{DELAYS_S[1]:g} s after admission",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--inherited",
        action="store_true",
        help="also sweep each phase after the ones before it (the line they leave): "
        "a second oracle, beside the one measured alone",
    )
    args = parser.parse_args(argv)
    delayed = bool(args.delayed)
    seconds = args.phase_seconds or (180.0 if delayed else 60.0)
    if args.quick:
        seconds = 90.0 if delayed else 30.0
    if delayed and seconds <= DELAYED_WARM_S:
        parser.error(f"--delayed needs phases longer than the oracles' warm-up of {DELAYED_WARM_S:g} s")
    phases = list(PHASES)
    # Visitors a second each phase's slots can serve (3 requests a visitor
    # in a slot; with --delayed, 1).
    heavy = 1 if delayed else len(STEPS)
    most = [slots * 1000 / WORK_MS / heavy for slots in phases]
    sweep_shares = (0.5, 0.7, 0.85, 1.0) if args.quick else (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    sweeps = [sorted({max(1, round(m * s)) for s in sweep_shares}) for m in most]
    oracles = [oracle(slots, seconds, rates, delayed) for slots, rates in zip(phases, sweeps, strict=True)]
    # Each phase's oracle rate, set at the phase's start: what an operator
    # who knew each change the moment it came would do. What it loses at a
    # change (the visitors admitted before it still come) no controller of
    # admissions can win back.
    schedule = [o["best"]["rate"] for o in oracles]
    inherited = []
    if args.inherited:
        for index, rates in enumerate(sweeps):
            inherited.append(inherited_oracle(index, phases, seconds, schedule, rates, delayed))
    runs = {
        "oracle_schedule": run(str(schedule[0]), phases, seconds, schedule, delayed),
        "adaptive": run("adaptive", phases, seconds, delayed=delayed),
        "fixed_high": run(str(round(max(most))), phases, seconds, delayed=delayed),
        "fixed_low": run(str(max(1, round(min(most) / 2))), phases, seconds, delayed=delayed),
    }
    report = reported(phases, oracles, inherited, runs, seconds, delayed)
    if args.json:
        print(json.dumps(report))
        return 0
    visit = f"; pay {DELAYS_S[0]:g}-{DELAYS_S[1]:g} s after admission" if delayed else ""
    print(f"target p95 {TARGET_MS} ms; phases of {seconds:g} s; {ARRIVALS:g} visitors/s arriving{visit}")
    print_table(report, list(runs), bool(inherited))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
