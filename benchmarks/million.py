"""The speed benchmark's last scenario (``python -m benchmarks``): a room
with a million waiting visitors (``--quick``: 100,000). The status poll at
the back of the line, beside the same poll in a short line, one admission
step of 1,000 visitors timed inside Redis, and Redis's memory a waiting
visitor (``python -m benchmarks.ten_million`` uses the last for its own)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import redis
import redis.asyncio as aioredis

from queuegate import Store
from queuegate.tokens import Tokens

from .app import ROOMS, SECRET
from .loadgen import run_load

__all__ = ["memory_per_visitor", "million"]


async def fill(url: str, count: int) -> None:
    client = aioredis.Redis.from_url(url)
    store = Store(client)
    room = next(r for r in ROOMS if r.name == "bench-big")
    batch = 5000
    for start in range(0, count, batch):
        await store.enter_many(room, [f"v{i:015d}" for i in range(start, min(count, start + batch))])
    await store.aclose()


async def admission_step(url: str) -> tuple[int, int]:
    """Open the paused big room; time (µs, inside Redis) the call that admits,
    and count whom it admitted."""
    client = aioredis.Redis.from_url(url)
    store = Store(client)
    room = next(r for r in ROOMS if r.name == "bench-big")
    await store.configure(room, status="open")  # its own advance still ran paused
    await client.config_set("slowlog-log-slower-than", 0)
    await client.slowlog_reset()
    admitted = (await store.stats(room))["active"]
    # Other clients' commands are logged too (the gated server's
    # subscription pings every 0.25 s): the admitting call is the longest
    # script run among the last entries.
    entries = await client.slowlog_get(128)
    await client.config_set("slowlog-log-slower-than", 10000)
    await store.aclose()
    script_runs = [int(e["duration"]) for e in entries if b"EVALSHA" in (e["command"] or b"").upper()]
    return max(script_runs), int(admitted)


def memory_per_visitor(url: str, count: int) -> float:
    client = redis.Redis.from_url(url)
    prefix = "qg:{bench-big}:"
    names = ("seq", "waiting", "seen", "active", "state", "alive", "alive_n")
    total = sum(int(client.memory_usage(prefix + name, samples=0) or 0) for name in names)
    client.close()
    return total / count


def million(gated: int, url: str, count: int, seconds: float, small_line: dict[str, str]) -> dict[str, Any]:
    """The big room: latency of one visitor's poll at the back (one request at
    a time, so it is the poll's own time, not queueing behind other load),
    next to the same poll in a short line."""
    started = time.monotonic()
    asyncio.run(fill(url, count))
    fill_seconds = time.monotonic() - started
    memory = memory_per_visitor(url, count)
    tokens = Tokens([SECRET], 86400)
    last = f"v{count - 1:015d}"
    headers = {"Cookie": f"qg_bench-big={tokens.issue('bench-big', last)}"}
    check = httpx.get(f"http://127.0.0.1:{gated}/_queuegate/status/bench-big", headers=headers).json()
    poll = run_load(gated, "/_queuegate/status/bench-big", seconds, 1, headers)
    short = run_load(gated, "/_queuegate/status/bench-wait", seconds, 1, small_line)
    step_us, admitted = asyncio.run(admission_step(url))
    return {
        "waiting": count,
        "position_of_last": check.get("position"),
        "fill_seconds": round(fill_seconds, 1),
        "poll_p50_ms": round(poll.p50_ms, 2),
        "poll_p99_ms": round(poll.p99_ms, 2),
        "short_line_poll_p50_ms": round(short.p50_ms, 2),
        "short_line_poll_p99_ms": round(short.p99_ms, 2),
        "admission_step_visitors": admitted,
        "admission_step_ms": round(step_us / 1000, 2),
        "memory_bytes_per_waiting_visitor": round(memory, 1),
    }
