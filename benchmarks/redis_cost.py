"""What each operation costs Redis, per call, in a line of a given length.

    python -m benchmarks.redis_cost [--waiting 1000] [--calls 20000] [--json]

A private Redis; one room filled with ``--waiting`` visitors (nobody is let
in: one admission an hour); then ``--calls`` status polls of visitors at the
front, in the middle and at the back of the line, ``--calls`` joins of
new visitors, and as many joined 16 to a call (``join_together_us``, per
join: how a busy process sends them, see ``queuegate.joins``). The figure
is Redis's own account of the time it spent in the script calls (``INFO
commandstats``: ``usec`` over ``calls`` of EVALSHA and FCALL), so the app's process
and the network are not in it. It moves with the
machine's speed: compare figures of one run, or against ``--baseline``
(the cost of ``EVALSHA`` of a script that only returns, on the same server).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer, server_binary

from .report import print_report

ROOM = Room("cost", paths=["/cost"], rate=1, per=3_600_000, abandon=3_600_000, client_limit=0)
CONCURRENCY = 32


async def evalsha_usec(client: aioredis.Redis) -> tuple[int, int]:
    """Script calls so far and their µs: EVALSHA, and FCALL (the joins sent
    together: queuegate.calls)."""
    stats = await client.info("commandstats")
    found = [stats.get(f"cmdstat_{name}", {}) for name in ("evalsha", "fcall")]
    return sum(int(got.get("calls", 0)) for got in found), sum(int(got.get("usec", 0)) for got in found)


async def per_call(client: aioredis.Redis, calls: list[Any]) -> float:
    """Run the coroutines ``calls`` (32 at a time); Redis's µs per EVALSHA."""
    before = await evalsha_usec(client)
    for start in range(0, len(calls), CONCURRENCY):
        await asyncio.gather(*calls[start : start + CONCURRENCY])
    after = await evalsha_usec(client)
    return (after[1] - before[1]) / max(1, after[0] - before[0])


async def measure(url: str, waiting: int, calls: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url)
    store = Store(aioredis.Redis.from_url(url), local_admissions=False)
    await store.enter(ROOM, "first")  # takes the one token: nobody else is let in
    batch = 5000
    for start in range(0, waiting, batch):
        await store.enter_many(ROOM, [f"w{i:012d}" for i in range(start, min(waiting, start + batch))])
    report: dict[str, float] = {"waiting": waiting}
    places = {"front": 0, "middle": waiting // 2, "back": waiting - 1}
    for name, index in places.items():
        visitor = f"w{index:012d}"
        outcome = await store.enter(ROOM, visitor, join=False)
        if outcome.state != "waiting" or outcome.rank != index:
            raise RuntimeError(f"expected place {index} in line, got {outcome}")
        report[f"poll_{name}_us"] = round(
            await per_call(client, [store.enter(ROOM, visitor, join=False) for _ in range(calls)]), 2
        )
    report["join_us"] = round(
        await per_call(client, [store.enter(ROOM, f"n{i:012d}") for i in range(calls)]), 2
    )
    # Joins sent together (queuegate.joins): 16 newcomers a call, as a busy
    # process sends them; µs per join.
    together = 16
    calls_before = await evalsha_usec(client)
    joins = [
        store.join_many(ROOM, [(f"t{i:08d}{j:02d}", "") for j in range(together)])
        for i in range(calls // together)
    ]
    for start in range(0, len(joins), CONCURRENCY):
        await asyncio.gather(*joins[start : start + CONCURRENCY])
    calls_after = await evalsha_usec(client)
    report["join_together_us"] = round((calls_after[1] - calls_before[1]) / (calls // together * together), 2)
    sha = await client.script_load("return 1")
    report["baseline_us"] = round(await per_call(client, [client.evalsha(sha, 0) for _ in range(calls)]), 2)
    await store.aclose()
    await client.aclose()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.redis_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with EmbeddedServer(server_binary("path")) as server:
        report = asyncio.run(measure(server.url, args.waiting, args.calls))
    report["seconds"] = round(time.monotonic() - started, 1)
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
