"""Ten million waiting in one room: what each poll costs Redis, and the share
of one Redis core the whole line would need at the waiting page's cadence.

    python -m benchmarks.ten_million [--waiting 10000000] [--admit-per-second 1000] [--json]

A private Redis and one gated uvicorn server (the speed benchmark's app).
The big room (paused, so nobody is let in) is filled straight in Redis with
the keys joins leave (an arrival number, a place in ``waiting``, a last poll
in ``seen``): far faster than ten million joins, and the same layout. Then:

- Redis's own µs per status poll (``INFO commandstats``) for a visitor at the
  front, in the middle and at the back, asked in full (``quick.lua``), and
  asked as a poll nearer the front than the view's far ranks asks it while
  the room is settled (``Store.front_rank``: ``HMGET`` and ``ZRANK``);
- Redis's µs per far-back visitor checked in (``checkin.lua``, in batches
  of 250) and per view of the line built (``view.lua``; see
  ``queuegate.farback``);
- the latency of a poll at the back through the gate (one request at a
  time), with the cookie a far-back visitor has (answered from the view),
  and without its place (asked in full);
- Redis memory per waiting visitor, and again once every visitor has
  checked in (their liveness in the check-in hash instead of ``seen``);
- the polls a second the line makes at the page's cadence: the room opened
  to let ``--admit-per-second`` in, the interval the scripts give visitors
  at ranks 5 % apart (a third of the estimated wait, between 1 and 20 s);
  and the share of one Redis core the line takes at the measured costs:
  visitors nearer the front than the view's first far rank ask their rank
  (cost interpolated along the line), and one poll after each refill is
  asked in full (it brings the room up to date: until then the room is not
  settled); everyone checks in once every ``record_after`` (rounded up to
  whole polls; the first check-in of each newcomer costs more: its
  liveness moves out of ``seen``), and four views are built a second.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from typing import Any

import httpx
import redis.asyncio as aioredis

from queuegate import Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.farback import View
from queuegate.store import FAR_MAX_AGE_MS
from queuegate.tokens import Tokens

from .app import ROOMS, SECRET
from .loadgen import run_load
from .million import memory_per_visitor
from .redis_cost import CONCURRENCY, evalsha_usec, per_call
from .report import print_report
from .speed import uvicorn_server

ROOM = next(r for r in ROOMS if r.name == "bench-big")
TARGET_CORE_SHARE = 0.5


def visitor(i: int) -> str:
    return f"v{i:015d}"


async def fill(url: str, count: int) -> None:
    """``count`` waiting visitors, as joins would leave them."""
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    await store.stats(ROOM)  # the room exists, with its settings
    seq, waiting, seen, _, _ = store.keys(ROOM.name)
    now = int((await store.stats(ROOM))["now"])
    batch = 20_000
    for start in range(0, count, batch):
        stop = min(count, start + batch)
        pipe = client.pipeline(transaction=False)
        pipe.zadd(waiting, {visitor(i): i + 1 for i in range(start, stop)})
        pipe.zadd(seen, dict.fromkeys((visitor(i) for i in range(start, stop)), now))
        await pipe.execute()
    await client.set(seq, count)
    await store.aclose()
    await client.aclose()


async def poll_costs(url: str, count: int, calls: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    costs: dict[str, float] = {}
    for name, index in {"front": 0, "middle": count // 2, "back": count - 1}.items():
        outcome = await store.enter(ROOM, visitor(index), join=False)
        if outcome.state != "waiting" or outcome.rank != index:
            raise RuntimeError(f"expected place {index} in line, got {outcome}")
        polls = [store.enter(ROOM, visitor(index), join=False) for _ in range(calls)]
        costs[name] = await per_call(client, polls)
    await store.aclose()
    await client.aclose()
    return costs


async def cpu_usec(client: aioredis.Redis) -> float:
    """Redis's CPU time so far (user and system), µs."""
    info = await client.info("cpu")
    return (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1e6


async def front_costs(url: str, count: int, calls: int) -> dict[str, float]:
    """Redis µs per poll answered the way polls nearer the front than the
    view's far ranks are while the room is settled: ``HMGET`` of the room's
    snapshot end and settings, and ``ZRANK``, sent together. Redis's whole
    CPU time (``INFO cpu``), reading the commands and writing the replies
    included: two plain commands cost that twice where a script call, whose
    ``commandstats`` figure leaves it out, costs it once."""
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    await store.stats(ROOM)  # brings the room up to date: it is settled
    costs: dict[str, float] = {}
    for name, index in {"front": 0, "middle": count // 2, "back": count - 1}.items():
        if await store.front_rank(ROOM, visitor(index)) != index:
            raise RuntimeError(f"the room is not settled, or {visitor(index)} is not at {index}")
        before = await cpu_usec(client)
        for start in range(0, calls, CONCURRENCY):
            ranks = [store.front_rank(ROOM, visitor(index)) for _ in range(min(CONCURRENCY, calls - start))]
            if set(await asyncio.gather(*ranks)) != {index}:
                raise RuntimeError("a poll near the front was not answered without a script")
        costs[f"rank_{name}"] = (await cpu_usec(client) - before) / calls
    await store.aclose()
    await client.aclose()
    return costs


async def far_back_costs(url: str, count: int, calls: int) -> dict[str, float]:
    """Redis µs per visitor checked in, in batches of 250 visitors drawn at
    random from the back half: their first check-in (``check_in_first``:
    their liveness moves from ``seen`` to the check-in hash, once per
    visitor) and every later one (``check_in``). Then per view built (the
    stored one dropped before each)."""
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    batch = 250
    rng = random.Random(1)
    drawn = rng.sample(range(count // 2, count), batch * max(1, calls // batch))
    batches = [[visitor(i) for i in drawn[start : start + batch]] for start in range(0, len(drawn), batch)]
    costs = {"check_in_first": await per_call(client, [store.check_in(ROOM, b) for b in batches]) / batch}
    costs["check_in"] = await per_call(client, [store.check_in(ROOM, b) for b in batches]) / batch
    state = store.keys(ROOM.name)[4]
    before = await evalsha_usec(client)
    builds = 10
    for _ in range(builds):
        await client.hdel(state, "view_at")
        await store.view(ROOM)
    after = await evalsha_usec(client)
    costs["view"] = (after[1] - before[1]) / builds
    await store.aclose()
    await client.aclose()
    return costs


async def cadence(url: str, count: int, per_second: float) -> tuple[list[tuple[int, float]], View]:
    """The poll interval (s) the scripts give at places along the line once
    the room lets ``per_second`` in: (rank, interval) at ranks 5 % apart.
    Asked of the scripts, not recomputed here: the rule lives in
    estimate.lua. Opening the room admits a few visitors while it is asked.
    With the view of the line far-back visitors are answered from."""
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    await store.configure(ROOM, status="open", rate=round(per_second), per=1.0)
    waiting = store.keys(ROOM.name)[1]
    ranks = sorted({0, *(round(1.05**k) for k in range(400) if 1.05**k < count)})
    samples = []
    for rank in ranks:
        ids = await client.zrange(waiting, rank, rank)
        if not ids:
            break
        first = ids[0]
        name = first.decode() if isinstance(first, bytes) else str(first)
        outcome = await store.enter(ROOM, name, join=False)
        if outcome.state == "waiting":
            samples.append((outcome.rank, outcome.poll_ms / 1000))
    view = await store.view(ROOM)
    await store.aclose()
    await client.aclose()
    return samples, view


async def check_in_everyone(url: str, count: int) -> int:
    """Every waiting visitor checks in once (their liveness moves to the
    check-in hash, as far back); returns how many are waiting."""
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    batch, calls = 500, []
    for start in range(0, count, batch):
        calls.append(store.check_in(ROOM, [visitor(i) for i in range(start, min(count, start + batch))]))
        if len(calls) == 32:
            await asyncio.gather(*calls)
            calls = []
    await asyncio.gather(*calls)
    waiting = int(await store.client.zcard(store.keys(ROOM.name)[1]))
    await store.aclose()
    return waiting


def line_load(
    count: int, samples: list[tuple[int, float]], costs: dict[str, float], view: View | None, joins: float
) -> tuple[float, float]:
    """Polls a second of the whole line, and the Redis µs a second they cost:
    each sampled interval holds up to the next sample's rank; the cost at a
    place is interpolated between front, middle and back. Without a view
    (or one with no far ranks, where every poll is asked in full), each
    poll is a script call. With one, visitors nearer the front than its
    first far rank ask their rank, those behind it nothing; everyone checks
    in every ``record_after`` (in whole polls), plus one full call after
    each refill, four views a second and a first check-in for each of
    ``joins`` newcomers a second."""
    middle = count // 2
    if view is not None and view.far < 0:
        view = None
    far = count if view is None else view.far

    def cost(place: float, kind: str = "") -> float:
        front, mid, back = (costs[kind + name] for name in ("front", "middle", "back"))
        if place <= middle:
            return front + (mid - front) * place / max(1, middle)
        return mid + (back - mid) * (place - middle) / max(1, count - 1 - middle)

    polls = micros = 0.0
    bounds = [rank for rank, _ in samples[1:]] + [count]
    for (rank, interval), end in zip(samples, bounds, strict=True):
        for low, high in ((rank, min(end, far)), (max(rank, far), end)):
            visitors = max(0, high - low)
            polls += visitors / interval
            if view is None:
                micros += visitors / interval * cost((low + high) / 2)
                continue
            every = max(1, math.ceil(view.record_after_ms / 1000 / interval)) * interval
            micros += visitors / every * costs["check_in"]
            if high <= far:
                micros += visitors / interval * cost((low + high) / 2, "rank_")
    if view is not None:
        # One poll after each refill (a second apart) is asked in full.
        micros += costs["front"] + joins * costs["check_in_first"]
        micros += costs["view"] * 1000 / (FAR_MAX_AGE_MS / 2)
    return polls, micros


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ten_million", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--waiting", type=int, default=10_000_000)
    parser.add_argument("--admit-per-second", type=float, default=1000.0)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report: dict[str, Any] = {"waiting": args.waiting, "admit_per_second": args.admit_per_second}
    with EmbeddedServer(server_binary("path")) as server:
        asyncio.run(fill(server.url, args.waiting))
        report["fill_seconds"] = round(time.monotonic() - started, 1)
        report["memory_bytes_per_waiting_visitor"] = round(memory_per_visitor(server.url, args.waiting), 1)
        costs = asyncio.run(poll_costs(server.url, args.waiting, args.calls))
        for name, cost in costs.items():
            report[f"poll_{name}_redis_us"] = round(cost, 2)
        for name, cost in asyncio.run(front_costs(server.url, args.waiting, args.calls)).items():
            report[f"poll_{name}_redis_us"] = round(cost, 2)
            costs[name] = cost
        far_costs = asyncio.run(far_back_costs(server.url, args.waiting, args.calls))
        report["check_in_redis_us"] = round(far_costs["check_in"], 2)
        report["check_in_first_redis_us"] = round(far_costs["check_in_first"], 2)
        report["view_build_redis_us"] = round(far_costs["view"], 1)
        costs.update(far_costs)
        status = f"/_queuegate/status/{ROOM.name}"
        with uvicorn_server("gated", server.url) as gated:
            tokens = Tokens([SECRET], 86400)
            last = visitor(args.waiting - 1)
            for name, place in (("", args.waiting), ("_asked", 0)):
                # A cookie whose liveness was recorded just now: no check-in.
                seen = int(time.time() * 1000) if place else 0
                cookie = tokens.issue(ROOM.name, last, place=place, seen_ms=seen)
                headers = {"Cookie": f"qg_{ROOM.name}={cookie}"}
                check = httpx.get(f"http://127.0.0.1:{gated.port}{status}", headers=headers)
                report[f"position_of_last{name}"] = check.json().get("position")
                time.sleep(0.2)  # the view is built
                poll = run_load(gated.port, status, args.seconds, 1, headers)
                report[f"poll{name}_p50_ms"] = round(poll.p50_ms, 2)
                report[f"poll{name}_p99_ms"] = round(poll.p99_ms, 2)
        samples, view = asyncio.run(cadence(server.url, args.waiting, args.admit_per_second))
        # Memory once everyone's liveness is in the check-in hash.
        waiting = asyncio.run(check_in_everyone(server.url, args.waiting))
        checked_in = memory_per_visitor(server.url, waiting)
        report["memory_bytes_per_waiting_visitor_checked_in"] = round(checked_in, 1)
    report["far_from_rank"] = view.far
    report["record_after_s"] = round(view.record_after_ms / 1000, 1)
    # In a steady line as many join a second as are let in.
    polls, micros = line_load(args.waiting, samples, costs, view, args.admit_per_second)
    report["polls_per_second"] = round(polls)
    report["redis_core_share"] = round(micros / 1e6, 2)
    all_asked = line_load(args.waiting, samples, costs, None, args.admit_per_second)[1]
    report["redis_core_share_all_asked"] = round(all_asked / 1e6, 2)
    report["target"] = f"redis_core_share <= {TARGET_CORE_SHARE}: " + (
        "met" if report["redis_core_share"] <= TARGET_CORE_SHARE else "MISSED"
    )
    report["seconds"] = round(time.monotonic() - started, 1)
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
