"""What the gate costs: the same trivial app served bare and gated, side by side.

    python -m benchmarks [--quick] [--json]

Starts a private Redis and two uvicorn servers (1 worker, uvloop, httptools),
one bare and one gated, and drives them in turn (bare, gated, bare, gated, ...)
with wrk when installed (Debian's ``wrk``), else a Python load generator. Each
figure is the median over the rounds; ratios compare runs of the same round.
Then a room with a million waiting visitors: the status poll at the back of
the line, one admission step of 1,000 visitors timed inside Redis, and Redis
memory per waiting visitor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio as aioredis

from queuegate import Store
from queuegate.embedded import EmbeddedServer, free_port, server_binary
from queuegate.tokens import Tokens

from .app import ROOMS, SECRET
from .loadgen import Result, run_load

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Served:
    port: int
    pid: int


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far; NaN where /proc
    cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_seconds(url: str) -> float:
    with redis.Redis.from_url(url) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass(frozen=True)
class Run:
    load: Result
    app_cpu_us: float  # the server process's CPU per request
    redis_cpu_us: float  # Redis's CPU per request


def measured(served: Served, redis_url: str, path: str, *load: Any) -> Run:
    app, server = cpu_seconds(served.pid), redis_cpu_seconds(redis_url)
    result = run_load(served.port, path, *load)
    app, server = cpu_seconds(served.pid) - app, redis_cpu_seconds(redis_url) - server
    count = max(1, result.requests)
    return Run(result, app / count * 1e6, server / count * 1e6)


def most_files() -> None:
    """Raise this process's open-file limit to its hard limit (held
    streams and load generators hold thousands of sockets)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def uvicorn_server(
    mode: str,
    redis_url: str,
    *,
    app: str = "benchmarks.app:app",
    env: dict[str, str] | None = None,
    workers: int = 1,
) -> Iterator[Served]:
    """uvicorn serving ``app`` (ready once ``/page`` answers); ``workers``
    processes (the pid is the first's, or the only worker's)."""
    port = free_port()
    env = {**os.environ, **(env or {}), "QUEUEGATE_BENCH_MODE": mode, "QUEUEGATE_REDIS_URL": redis_url}
    command = [
        sys.executable, "-m", "uvicorn", app, "--port", str(port), "--loop", "uvloop",
        "--http", "httptools", "--log-level", "warning", "--no-access-log", "--backlog", "4096",
    ]  # fmt: skip
    if workers > 1:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, preexec_fn=most_files)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/page", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"uvicorn ({mode}) did not start") from None
                time.sleep(0.1)
        yield Served(port, process.pid)
    finally:
        process.terminate()
        process.wait(10)


def cookie(port: int, path: str, room: str, visits: int) -> str:
    """The room's cookie of the last of ``visits`` new visitors to ``path``."""
    value = ""
    for _ in range(visits):
        value = httpx.get(f"http://127.0.0.1:{port}{path}").cookies[f"qg_{room}"]
    return f"qg_{room}={value}"


def side_by_side(
    bare: Served,
    gated: Served,
    redis_url: str,
    path: str,
    headers: dict[str, str],
    rounds: int,
    seconds: float,
    connections: int,
    many_clients: bool = False,
) -> tuple[dict[str, Any], int]:
    """The figures of the scenario, and how many gated requests were made."""
    pairs: list[tuple[Run, Run]] = []
    for _ in range(rounds):
        pairs.append(
            (
                measured(bare, redis_url, "/page", seconds, connections, {}, many_clients),
                measured(gated, redis_url, path, seconds, connections, headers, many_clients),
            )
        )
    med = statistics.median
    loads = [(bare_run.load, gated_run.load) for bare_run, gated_run in pairs]
    return {
        "bare_rps": round(med(b.requests_per_second for b, _ in loads)),
        "gated_rps": round(med(g.requests_per_second for _, g in loads)),
        "throughput_ratio": round(med(g.requests_per_second / b.requests_per_second for b, g in loads), 3),
        "bare_p99_ms": round(med(b.p99_ms for b, _ in loads), 2),
        "gated_p99_ms": round(med(g.p99_ms for _, g in loads), 2),
        "p99_ratio": round(med(g.p99_ms / b.p99_ms for b, g in loads), 2),
        "gated_p50_ms": round(med(g.p50_ms for _, g in loads), 2),
        # Where the time goes: the app process's CPU per request, bare and
        # gated, and Redis's per gated request.
        "bare_app_cpu_us": round(med(b.app_cpu_us for b, _ in pairs), 1),
        "gated_app_cpu_us": round(med(g.app_cpu_us for _, g in pairs), 1),
        "redis_cpu_us": round(med(g.redis_cpu_us for _, g in pairs), 1),
        "errors": sum(b.errors + g.errors for b, g in loads),
    }, sum(g.requests for _, g in loads)


async def line_length(url: str) -> int:
    store = Store(aioredis.Redis.from_url(url))
    stats = await store.stats("bench-join")
    await store.aclose()
    return int(stats["waiting"]) + int(stats["active"])


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


# The speed issue's targets (admitted visitors decided in-process; polls and
# joins that cost Redis little).
TARGETS = [
    ("admitted", "throughput_ratio", ">=", 0.85),
    ("admitted", "p99_ratio", "<=", 1.2),
    ("polling", "throughput_ratio", ">=", 0.85),
    ("polling", "redis_cpu_us", "<=", 5.0),
    ("joining", "throughput_ratio", ">=", 0.70),
    ("joining", "redis_cpu_us", "<=", 12.0),
    ("joining", "gated_p99_ms", "<=", 10.0),
    ("joining", "joined_share", ">=", 0.999),
    ("million", "poll_p99_ms", "<=", 2.0),
    ("million", "admission_step_ms", "<=", 10.0),
    ("million", "memory_bytes_per_waiting_visitor", "<=", 250.0),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="shorter runs and 100,000 waiting (under a minute)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    seconds = 2.0 if args.quick else 4.0
    count = 100_000 if args.quick else 1_000_000
    started = time.monotonic()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load": "wrk" if subprocess.run(["which", "wrk"], capture_output=True).returncode == 0 else "python",
    }
    with EmbeddedServer(server_binary("path")) as server:
        report["redis"] = server.version().split(" sha=")[0]
        with uvicorn_server("bare", server.url) as bare, uvicorn_server("gated", server.url) as gated:
            admitted = {"Cookie": cookie(gated.port, "/page", "bench-in", 1)}
            waiting = {"Cookie": cookie(gated.port, "/wait", "bench-wait", 2)}
            scenarios = {
                "admitted": ("/page", admitted, False),
                "polling": ("/_queuegate/status/bench-wait", waiting, False),
                "joining": ("/join", {}, True),
            }
            for name, (path, headers, many_clients) in scenarios.items():
                report[name], requests = side_by_side(
                    bare,
                    gated,
                    server.url,
                    path,
                    headers,
                    args.rounds,
                    seconds,
                    args.connections,
                    many_clients,
                )
                if name == "joining":
                    # Each join took a place (none was refused by the limit
                    # on new places per client, nor failed).
                    report[name]["joined_share"] = round(asyncio.run(line_length(server.url)) / requests, 3)
                if not args.json:
                    print(name, report[name], flush=True)
            report["million"] = million(gated.port, server.url, count, seconds, waiting)
    report["seconds"] = round(time.monotonic() - started)
    report["targets"] = [
        {
            "scenario": scenario,
            "figure": figure,
            "target": f"{op} {limit}",
            "value": report[scenario][figure],
            "met": report[scenario][figure] >= limit if op == ">=" else report[scenario][figure] <= limit,
        }
        for scenario, figure, op, limit in TARGETS
    ]
    if args.json:
        print(json.dumps(report))
    else:
        print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    print(f"\nmachine: {report['machine']}; {report['redis']}; load from {report['load']}")
    columns = (
        "bare req/s",
        "gated req/s",
        "ratio",
        "bare p99",
        "gated p99",
        "app µs bare",
        "gated",
        "redis µs",
    )
    print(f"{'scenario':<10} " + " ".join(f"{c:>11}" for c in columns))
    for name in ("admitted", "polling", "joining"):
        r = report[name]
        print(
            f"{name:<10} {r['bare_rps']:>11} {r['gated_rps']:>11} {r['throughput_ratio']:>11} "
            f"{r['bare_p99_ms']:>9}ms {r['gated_p99_ms']:>9}ms {r['bare_app_cpu_us']:>11} "
            f"{r['gated_app_cpu_us']:>11} {r['redis_cpu_us']:>11}"
        )
    print("(app µs: the server process's CPU per request; redis µs: Redis's per gated request)")
    m = report["million"]
    print(
        f"\n{m['waiting']:,} waiting: a status poll at the back takes p50 {m['poll_p50_ms']} ms, "
        f"p99 {m['poll_p99_ms']} ms (in a short line: p50 {m['short_line_poll_p50_ms']} ms, "
        f"p99 {m['short_line_poll_p99_ms']} ms); admitting {m['admission_step_visitors']} took "
        f"{m['admission_step_ms']} ms inside Redis; {m['memory_bytes_per_waiting_visitor']} bytes "
        "of Redis memory per waiting visitor"
    )
    print("\ntargets:")
    for t in report["targets"]:
        mark = "met " if t["met"] else "MISSED"
        print(f"  {mark} {t['scenario']} {t['figure']} = {t['value']} (target {t['target']})")
    print(f"\n{report['seconds']} s in all")
