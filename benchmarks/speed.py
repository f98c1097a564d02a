"""What the gate costs: the same trivial app served bare and gated, side by side.

    python -m benchmarks [--quick] [--json] [--generators N] [--scenarios a,b]

Starts a private Redis and two uvicorn servers (1 worker, uvloop, httptools),
one bare and one gated, and drives them in turn (bare, gated, bare, gated, ...)
with wrk when installed (Debian's ``wrk``), else a Python load generator, in
``--generators`` processes (wrk: threads). Each figure is the median over the
rounds; ratios compare runs of the same round; ``generator_busy`` is the
busiest generator's CPU share (near 1.0: the generator, not the gate, was
the limit). The join storm runs twice: flat out, and paced at a fixed
arrival rate (``--rate``, default half the flat-out gated rate) from 128
connections, where an idle event loop sends fewer joins together; both say
how many joins went to Redis in one call on average (``joins_per_call``).
Then a room with a million waiting visitors: the status poll at the back of
the line, one admission step of 1,000 visitors timed inside Redis, and Redis
memory per waiting visitor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import redis.asyncio as aioredis

from queuegate import Store
from queuegate.calls import UnknownRoom
from queuegate.embedded import EmbeddedServer, server_binary

from .million import million
from .serving import ROOT, Run, Served, cookie, evalsha_baseline_us, measured, most_files, uvicorn_server

__all__ = ["ROOT", "Served", "cookie", "main", "measured", "most_files", "uvicorn_server"]


def sample_join(bare: int, gated: int) -> int:
    """Hand the bare app one join's answer from the gated app, to send
    again as the joins' control (benchmarks.app); its body's size."""
    for address in ("192.0.2.1", "192.0.2.2"):  # (the room's first visitor may be let in at once)
        answer = httpx.get(f"http://127.0.0.1:{gated}/join", headers={"X-Forwarded-For": address})
    if "qg_bench-join" not in answer.cookies:
        raise RuntimeError(f"a join was not answered with a place: {answer.status_code}")
    headers = [(name, value) for name, value in answer.headers.multi_items()]
    given = {"status": answer.status_code, "headers": headers, "body": answer.text}
    httpx.post(f"http://127.0.0.1:{bare}/_bench/sample", json=given).raise_for_status()
    return len(answer.content)


def joins_sent(port: int) -> dict[str, int]:
    """The gated server's account of its newcomers' joins (benchmarks.app)."""
    return dict(httpx.get(f"http://127.0.0.1:{port}/_bench/joins").json())


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
    generators: int = 1,
    rate: float | None = None,
    control: str | None = None,
) -> tuple[dict[str, Any], int]:
    """The figures of the scenario, and how many gated requests were made.
    ``control``: a path of the bare app measured too in each round (its
    figures as ``control_*``)."""
    pairs: list[tuple[Run, Run]] = []
    controls: list[Run] = []
    pace = {"generators": generators, "rate": rate}
    before = joins_sent(gated.port)
    for _ in range(rounds):
        bare_run = measured(bare, redis_url, "/page", seconds, connections, {}, many_clients, **pace)
        if control:
            controls.append(
                measured(bare, redis_url, control, seconds, connections, {}, many_clients, **pace)
            )
        pairs.append(
            (bare_run, measured(gated, redis_url, path, seconds, connections, headers, many_clients, **pace))
        )
    after = joins_sent(gated.port)
    med = statistics.median
    loads = [(bare_run.load, gated_run.load) for bare_run, gated_run in pairs]
    busy = max(run.load.generator_busy for pair in pairs for run in pair)
    calls = after["calls"] - before["calls"]
    versus: dict[str, Any] = {}
    if controls:
        # The bare app sending the gated answer's bytes again: how much of
        # the gated figures is the answer's size and headers alone.
        rounds_of = list(zip(controls, pairs, strict=True))
        versus = {
            "control_rps": round(med(c.load.requests_per_second for c in controls)),
            "control_ratio": round(
                med(c.load.requests_per_second / b.load.requests_per_second for c, (b, _) in rounds_of), 3
            ),
            "gated_vs_control": round(
                med(g.load.requests_per_second / c.load.requests_per_second for c, (_, g) in rounds_of), 3
            ),
            "control_app_cpu_us": round(med(c.app_cpu_us for c in controls), 1),
            "control_app_cpu_ratio": round(med(c.app_cpu_us / b.app_cpu_us for c, (b, _) in rounds_of), 2),
        }
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
        "app_cpu_ratio": round(med(g.app_cpu_us / b.app_cpu_us for b, g in pairs), 2),
        "errors": sum(b.errors + g.errors for b, g in loads),
        # Newcomers' joins sent to Redis together (queuegate.joins): joins
        # per shared call, and joins that took the full call on their own.
        "joins_per_call": round((after["answered"] - before["answered"]) / calls, 1) if calls else 0.0,
        "joins_alone": after["unsettled"] - before["unsettled"],
        "generators": generators,
        "generator_busy": busy,
        "generator_saturated": busy >= SATURATED,
        **({"offered_rps": round(rate)} if rate is not None else {}),
        **versus,
    }, sum(g.requests for _, g in loads)


async def line_length(url: str) -> int:
    store = Store(aioredis.Redis.from_url(url))
    try:
        stats = await store.stats("bench-join")
    except UnknownRoom:  # nobody has joined yet
        return 0
    finally:
        await store.aclose()
    return int(stats["waiting"]) + int(stats["active"])


# A generator busy this share of a core or more was the limit, not the server.
SATURATED = 0.9

# The speed issues' targets (admitted visitors decided in-process; polls and
# joins that cost Redis little; a new visitor at about a bare request's cost).
TARGETS = [
    ("admitted", "throughput_ratio", ">=", 0.90),
    ("admitted", "p99_ratio", "<=", 1.2),
    ("polling", "throughput_ratio", ">=", 0.85),
    ("polling", "redis_cpu_us", "<=", 5.0),
    ("joining", "throughput_ratio", ">=", 0.70),
    ("joining", "redis_cpu_us", "<=", 12.0),
    ("joining", "gated_p99_ms", "<=", 10.0),
    ("joining", "joined_share", ">=", 0.999),
    ("joining", "app_cpu_ratio", "<=", 1.5),
    ("million", "poll_p99_ms", "<=", 2.0),
    ("million", "admission_step_ms", "<=", 10.0),
    ("million", "memory_bytes_per_waiting_visitor", "<=", 250.0),
]


SCENARIOS = ("admitted", "polling", "joining", "joining_paced", "million")
PACED_RATE = 2000.0  # joins a second when paced alone (no flat-out run to take half of)
PACED_CONNECTIONS = 128


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="shorter runs and 100,000 waiting (under a minute)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--generators",
        type=int,
        default=max(1, min(8, (os.cpu_count() or 1) // 4)),
        help="load-generator processes (wrk: threads); default a quarter of the cores, 1 to 8",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="the paced join storm's arrivals a second (default: half the flat-out gated rate)",
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)",
    )
    args = parser.parse_args(argv)
    chosen = [name for name in args.scenarios.split(",") if name]
    if unknown := set(chosen) - set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    seconds = 2.0 if args.quick else 4.0
    count = 100_000 if args.quick else 1_000_000
    started = time.monotonic()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load": "wrk" if subprocess.run(["which", "wrk"], capture_output=True).returncode == 0 else "python",
        "generators": args.generators,
    }
    with EmbeddedServer(server_binary("path")) as server:
        report["redis"] = server.version().split(" sha=")[0]
        report["redis_baseline_us"] = evalsha_baseline_us(server.url)
        with uvicorn_server("bare", server.url) as bare, uvicorn_server("gated", server.url) as gated:
            admitted = {"Cookie": cookie(gated.port, "/page", "bench-in", 1)}
            waiting = {"Cookie": cookie(gated.port, "/wait", "bench-wait", 2)}
            scenarios = {
                "admitted": ("/page", admitted, False),
                "polling": ("/_queuegate/status/bench-wait", waiting, False),
                "joining": ("/join", {}, True),
                "joining_paced": ("/join", {}, True),
            }
            if {"joining", "joining_paced"} & set(chosen):
                page_bytes = sample_join(bare.port, gated.port)
            for name, (path, headers, many_clients) in scenarios.items():
                if name not in chosen:
                    continue
                rate = None
                connections = args.connections
                if name == "joining_paced":
                    flat_out = report.get("joining", {}).get("gated_rps")
                    rate = args.rate or (flat_out / 2 if flat_out else PACED_RATE)
                    connections = PACED_CONNECTIONS
                line_before = asyncio.run(line_length(server.url))
                report[name], requests = side_by_side(
                    bare,
                    gated,
                    server.url,
                    path,
                    headers,
                    args.rounds,
                    seconds,
                    connections,
                    many_clients,
                    args.generators,
                    rate,
                    "/_bench/sample" if path == "/join" else None,
                )
                if path == "/join":
                    # Each join took a place (none was refused by the limit
                    # on new places per client, nor failed).
                    joined = asyncio.run(line_length(server.url)) - line_before
                    report[name]["joined_share"] = round(joined / requests, 3)
                    report[name]["control_bytes"] = page_bytes
                if not args.json:
                    print(name, report[name], flush=True)
            if "million" in chosen:
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
        if scenario in report
    ]
    if args.json:
        print(json.dumps(report))
        # The verdicts for a reader too (stdout stays one JSON line).
        print("targets:", *target_lines(report), sep="\n", file=sys.stderr)
    else:
        print_table(report)
    return 0


def target_lines(report: dict[str, Any]) -> list[str]:
    return [
        f"  {'met   ' if t['met'] else 'MISSED'} {t['scenario']} {t['figure']} = {t['value']} "
        f"(target {t['target']})"
        for t in report["targets"]
    ]


def print_table(report: dict[str, Any]) -> None:
    print(
        f"\nmachine: {report['machine']}; {report['redis']} (an empty EVALSHA "
        f"{report['redis_baseline_us']} µs); load from {report['load']}"
    )
    columns = (
        "bare req/s",
        "gated req/s",
        "ratio",
        "bare p99",
        "gated p99",
        "app µs bare",
        "gated",
        "redis µs",
        "gen. busy",
    )
    print(f"{'scenario':<13} " + " ".join(f"{c:>11}" for c in columns))
    for name in ("admitted", "polling", "joining", "joining_paced"):
        r = report.get(name)
        if r is None:
            continue
        print(
            f"{name:<13} {r['bare_rps']:>11} {r['gated_rps']:>11} {r['throughput_ratio']:>11} "
            f"{r['bare_p99_ms']:>9}ms {r['gated_p99_ms']:>9}ms {r['bare_app_cpu_us']:>11} "
            f"{r['gated_app_cpu_us']:>11} {r['redis_cpu_us']:>11} {r['generator_busy']:>11}"
        )
    print(
        "(app µs: the server process's CPU per request; redis µs: Redis's per gated request; "
        f"gen. busy: the busiest of {report['generators']} load generator(s), share of a core)"
    )
    for name in ("joining", "joining_paced"):
        r = report.get(name)
        if r is not None:
            paced = f" at {r['offered_rps']:,} a second" if "offered_rps" in r else " flat out"
            print(
                f"{name}{paced}: {r['joins_per_call']} joins per Redis call, "
                f"{r['joins_alone']} on their own; app CPU {r['app_cpu_ratio']} x bare"
            )
    if any(r.get("generator_saturated") for r in report.values() if isinstance(r, dict)):
        print("the load generator saturated in some runs (busy >= 0.9): those measure it, not the gate")
    m = report.get("million")
    if m is not None:
        print(
            f"\n{m['waiting']:,} waiting: a status poll at the back takes p50 {m['poll_p50_ms']} ms, "
            f"p99 {m['poll_p99_ms']} ms (in a short line: p50 {m['short_line_poll_p50_ms']} ms, "
            f"p99 {m['short_line_poll_p99_ms']} ms); admitting {m['admission_step_visitors']} took "
            f"{m['admission_step_ms']} ms inside Redis; {m['memory_bytes_per_waiting_visitor']} bytes "
            "of Redis memory per waiting visitor"
        )
    print("\ntargets:")
    print("\n".join(target_lines(report)))
    print(f"\n{report['seconds']} s in all")
