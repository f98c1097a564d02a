"""Ten million waiting in one room: what each poll costs Redis, and the share
of one Redis core the whole line would need at the waiting page's cadence.

    python -m benchmarks.ten_million [--waiting 10000000] [--admit-per-second 1000] [--json]

A private Redis and one gated uvicorn server (the speed benchmark's app).
The big room (paused, so nobody is let in) is filled straight in Redis with
the keys joins leave (an arrival number, a place in ``waiting``, a last poll
in ``seen``): far faster than ten million joins, and the same layout. Then:

- Redis's own µs per status poll (``INFO commandstats``) for a visitor at the
  front, in the middle and at the back;
- the latency of a poll at the back through the gate (one request at a time);
- Redis memory per waiting visitor;
- the polls a second the line makes at the page's cadence: the room opened
  to let ``--admit-per-second`` in, the interval the scripts give visitors
  at ranks 5 % apart (a third of the estimated wait, between 1 and 20 s);
  and the share of one Redis core those polls take at the measured costs
  (interpolated along the line).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx
import redis.asyncio as aioredis

from queuegate import Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.tokens import Tokens

from .app import ROOMS, SECRET
from .loadgen import run_load
from .redis_cost import per_call
from .report import print_report
from .speed import memory_per_visitor, uvicorn_server

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


async def cadence(url: str, count: int, per_second: float) -> list[tuple[int, float]]:
    """The poll interval (s) the scripts give at places along the line once
    the room lets ``per_second`` in: (rank, interval) at ranks 5 % apart.
    Asked of the scripts, not recomputed here: the rule lives in
    estimate.lua. Opening the room admits a few visitors while it is asked."""
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
    await store.aclose()
    await client.aclose()
    return samples


def line_load(count: int, samples: list[tuple[int, float]], costs: dict[str, float]) -> tuple[float, float]:
    """Polls a second of the whole line, and the Redis µs a second they cost:
    each sampled interval holds up to the next sample's rank; the cost at a
    place is interpolated between front, middle and back."""
    middle = count // 2

    def cost(place: float) -> float:
        if place <= middle:
            return costs["front"] + (costs["middle"] - costs["front"]) * place / max(1, middle)
        share = (place - middle) / max(1, count - 1 - middle)
        return costs["middle"] + (costs["back"] - costs["middle"]) * share

    polls = micros = 0.0
    bounds = [rank for rank, _ in samples[1:]] + [count]
    for (rank, interval), end in zip(samples, bounds, strict=True):
        visitors = end - rank
        polls += visitors / interval
        micros += visitors / interval * cost((rank + end) / 2)
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
        with uvicorn_server("gated", server.url) as gated:
            tokens = Tokens([SECRET], 86400)
            headers = {"Cookie": f"qg_{ROOM.name}={tokens.issue(ROOM.name, visitor(args.waiting - 1))}"}
            check = httpx.get(f"http://127.0.0.1:{gated.port}/_queuegate/status/{ROOM.name}", headers=headers)
            report["position_of_last"] = check.json().get("position")
            poll = run_load(gated.port, f"/_queuegate/status/{ROOM.name}", args.seconds, 1, headers)
            report["poll_p50_ms"] = round(poll.p50_ms, 2)
            report["poll_p99_ms"] = round(poll.p99_ms, 2)
        samples = asyncio.run(cadence(server.url, args.waiting, args.admit_per_second))
    polls, micros = line_load(args.waiting, samples, costs)
    report["polls_per_second"] = round(polls)
    report["redis_core_share"] = round(micros / 1e6, 2)
    report["target"] = f"redis_core_share <= {TARGET_CORE_SHARE}: " + (
        "met" if report["redis_core_share"] <= TARGET_CORE_SHARE else "MISSED"
    )
    report["seconds"] = round(time.monotonic() - started, 1)
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
