"""How soon a waiting visitor learns that its turn has come, pushed (the
page's stream) and polled (the page's fallback), side by side.

    python -m benchmarks.turn [--visitors 80] [--json]

A gated uvicorn worker (as in ``python -m benchmarks``) with a room that
admits 4 visitors a second. ``--visitors`` join it at once; half then hold a
stream (``/_queuegate/stream/<room>``), half poll the status endpoint at the
``poll_after_seconds`` the gate asks for, as the page does. Each records the
moment (this host's clock) it learns it is in; Redis's active set says when
it was admitted (the session's end minus its length, Redis's clock on the
same host).

What a held stream costs is ``python -m benchmarks.streams``: this module
used to measure it by reading each stream's first line through an iterator
it then dropped, which closed the stream, so it measured streams that were
no longer open.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
import redis

from queuegate.embedded import EmbeddedServer, server_binary

from .report import print_report
from .speed import uvicorn_server

ROOM, SESSION_MS = "bench-turn", 600_000


def visitor_of(client: httpx.AsyncClient, room: str) -> str:
    return client.cookies[f"qg_{room}"].split(".")[0].split("~")[0]


async def learn_by_stream(client: httpx.AsyncClient, base: str) -> float:
    async with client.stream("GET", f"{base}/_queuegate/stream/{ROOM}", timeout=120) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "state":
                return time.time() * 1000
    raise RuntimeError("the stream ended without the turn")


async def learn_by_polling(client: httpx.AsyncClient, base: str) -> float:
    while True:
        answer = (await client.get(f"{base}/_queuegate/status/{ROOM}")).json()
        if answer["state"] != "waiting":
            return time.time() * 1000
        await asyncio.sleep(answer["poll_after_seconds"])


async def turns(base: str, redis_url: str, visitors: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=1)
    clients = [httpx.AsyncClient(limits=limits) for _ in range(visitors)]
    try:
        how = ["stream" if i % 2 else "poll" for i in range(visitors)]
        listening = []
        for client, kind in zip(clients, how, strict=True):
            # In order, each listening as soon as it has joined (a visitor
            # admitted before it listens would only measure the joins).
            await client.get(f"{base}/turn")
            learn = learn_by_stream if kind == "stream" else learn_by_polling
            listening.append(asyncio.create_task(learn(client, base)))
            await asyncio.sleep(0.005)
        learned = await asyncio.gather(*listening)
        with redis.Redis.from_url(redis_url) as check:
            admitted = {
                member.decode(): score - SESSION_MS
                for member, score in check.zrange(f"qg:{{{ROOM}}}:active", 0, -1, withscores=True)
            }
        latency: dict[str, list[float]] = {"stream": [], "poll": []}
        for client, kind, at in zip(clients, how, learned, strict=True):
            visitor = visitor_of(client, ROOM)
            if visitor in admitted:  # the first 4 went straight in when they joined
                latency[kind].append(at - admitted[visitor])
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))

    def summary(values: list[float]) -> dict[str, float]:
        values = sorted(values)
        return {
            "count": len(values),
            "p50_ms": round(statistics.median(values)),
            "p95_ms": round(values[min(len(values) - 1, int(len(values) * 0.95))]),
            "max_ms": round(values[-1]),
        }

    return {kind: summary(values) for kind, values in latency.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--visitors", type=int, default=80)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with EmbeddedServer(server_binary("path")) as server, uvicorn_server("gated", server.url) as gated:
        base = f"http://127.0.0.1:{gated.port}"
        report = {"visitors": args.visitors, **asyncio.run(turns(base, server.url, args.visitors))}
    print_report(report, args.json)
    if not args.json:
        p95 = report["stream"]["p95_ms"]
        print(f"{'target':>28}  stream p95 <= 250 ms: {'met' if p95 <= 250 else 'MISSED'} ({p95} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
