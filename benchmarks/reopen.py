"""The line's promises under the operator's console: never more than N an
interval, and a room that admits the moment it is opened.

    python -m benchmarks.reopen [--tries 20] [--workers 3] [--json]

Three uvicorn workers (``--workers``) serve the benchmark app with a room of
5 visitors per 2 s; 50 visitors wait in it, and the heads of the line hold
the waiting page's stream. Then:

1. ``--tries`` times: the room is paused, left paused for a silence drawn
   from 0.2 s to 9 s (under, at and over whole intervals), and opened with
   ``queuegate set --status open`` (the console, a process of its own).
   For each: the time from the command's call to the first admission
   (Redis's clock: a session's end minus its length), and to the first
   stream that hears its turn (this host's clock).
2. The console scenario that found the burst: paused, opened 4.5 s later,
   closed 2.5 s later, opened, passed through, set to 10 a second.

Every admission of the run is then counted by the bucket's interval it fell
in (the room's refills: ``refill_at`` modulo ``per``); the largest count is
printed against N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx
import redis

from queuegate.embedded import EmbeddedServer, server_binary

from .report import print_report
from .speed import uvicorn_server

ROOM, RATE, PER_MS, SESSION_MS = "bench-reopen", 5, 2000, 3_600_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def console(redis_url: str, *args: str) -> float:
    """Run ``queuegate set ROOM ARGS``; the wall-clock time (s) just before
    its call to Redis is made, as the console process itself reports it."""
    code = (
        "import sys, time\n"
        "from queuegate.cli import main\n"
        "print(time.time(), file=sys.stderr, flush=True)\n"
        "main(sys.argv[1:])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--redis", redis_url, "set", ROOM, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stderr.split()[0])


async def hear_turn(client: httpx.AsyncClient, base: str, heard: list[float]) -> None:
    """Hold the visitor's stream; note when it says the turn has come."""
    async with client.stream("GET", f"{base}/_queuegate/stream/{ROOM}", timeout=None) as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "state":
                heard.append(time.time())
                return


class Line:
    """Visitors in the room, each with a client of its own, by visitor id."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.clients: dict[str, httpx.AsyncClient] = {}

    async def join(self, count: int) -> None:
        for _ in range(count):
            client = httpx.AsyncClient(timeout=30)
            await client.get(f"{self.base}/reopen")
            self.clients[client.cookies[f"qg_{ROOM}"].split(".")[0].split("~")[0]] = client

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients.values()))


def admissions(check: Any) -> list[int]:
    """Every admission's Redis time (ms), from the active set."""
    return sorted(
        int(score) - SESSION_MS for _, score in check.zrange(f"qg:{{{ROOM}}}:active", 0, -1, withscores=True)
    )


def redis_ms(check: Any) -> int:
    seconds, micros = check.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def run(redis_url: str, base: str, tries: int, seed: int) -> dict[str, Any]:
    draw = random.Random(seed)
    check: Any = redis.Redis.from_url(redis_url)
    line = Line(base)
    to_admission: list[float] = []
    to_stream: list[float] = []
    try:
        await line.join(50)
        for _ in range(tries):
            console(redis_url, "--status", "paused")
            await line.join(RATE)  # the line keeps its length
            heads = [m.decode() for m in check.zrange(f"qg:{{{ROOM}}}:waiting", 0, RATE - 1)]
            heard: list[float] = []
            listeners = [asyncio.create_task(hear_turn(line.clients[v], base, heard)) for v in heads]
            await asyncio.sleep(draw.choice([0.2, 0.9, 1.99, 2.0, 2.01, 4.5, 6.0, 9.0]))
            before = set(admissions(check))
            offset = redis_ms(check) / 1000 - time.time()  # Redis's clock on this host
            sent = console(redis_url, "--status", "open")
            new = sorted(set(admissions(check)) - before)
            if new:
                to_admission.append(new[0] / 1000 - offset - sent)
            await asyncio.wait(listeners, timeout=5)
            for task in listeners:
                task.cancel()
            if heard:
                to_stream.append(min(heard) - sent)
        # The console scenario of issue 35, with 100 more waiting.
        await line.join(100)
        for status, then in [("paused", 4.5), ("open", 2.5), ("closed", 3.0), ("open", 1.0)]:
            console(redis_url, "--status", status)
            await asyncio.sleep(then)
        console(redis_url, "--status", "passthrough")
        await asyncio.sleep(5.0)
        raised_at = redis_ms(check)
        console(redis_url, "--status", "open", "--rate", "10")
        await asyncio.sleep(6.0)
        state = check.hmget(f"qg:{{{ROOM}}}:state", "refill_at")
        phase = int(state[0] or 0) % PER_MS
        times = admissions(check)
    finally:
        await line.aclose()
        check.close()
    # Whole intervals before the rate was raised to 10, and after it.
    counts = Counter((at - phase) // PER_MS for at in times if at < raised_at - PER_MS)
    counts_10 = Counter((at - phase) // PER_MS for at in times if at >= raised_at)

    def p(values: list[float], q: float) -> float:
        """The q-quantile in ms, -1 when there is none."""
        values = sorted(values)
        return round(values[min(len(values) - 1, int(len(values) * q))] * 1000, 1) if values else -1

    return {
        "tries": tries,
        "open_to_first_admission_ms_p50": p(to_admission, 0.5),
        "open_to_first_admission_ms_p99": p(to_admission, 0.99),
        "open_to_first_stream_turn_ms_p50": p(to_stream, 0.5),
        "open_to_first_stream_turn_ms_p99": p(to_stream, 0.99),
        "admissions": len(times),
        "most_in_one_interval_n5": max(counts.values(), default=0),
        "most_in_one_interval_n10": max(counts_10.values(), default=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reopen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.tries, args.workers, args.seed)
    print_report(report, args.json)
    if not args.json:
        for name, met in targets(report).items():
            print(f"{'target':>34}  {name}: {'met' if met else 'MISSED'}")
    return 0


def measure(tries: int = 20, workers: int = 3, seed: int = 1) -> dict[str, Any]:
    """The whole run (its own Redis and workers); the report."""
    with (
        EmbeddedServer(server_binary("path")) as server,
        uvicorn_server("gated", server.url, workers=workers) as served,
    ):
        time.sleep(1.0)  # every worker up, not only the first
        return asyncio.run(run(server.url, f"http://127.0.0.1:{served.port}", tries, seed))


def targets(report: dict[str, Any]) -> dict[str, bool]:
    p99 = report["open_to_first_admission_ms_p99"]
    return {
        "first admission p99 <= 100 ms": 0 <= p99 <= 100,
        "never more than N an interval": report["most_in_one_interval_n5"] <= RATE
        and report["most_in_one_interval_n10"] <= 10,
    }


if __name__ == "__main__":
    raise SystemExit(main())
