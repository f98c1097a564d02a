"""Streams held open, thousands at once: what each costs a worker, what
Redis does per second as their number grows, and how soon each hears its
turn.

    python -m benchmarks.streams [--streams 15000] [--generators 4] [--json]

One uvicorn worker (uvloop, httptools) serves the gated benchmark app, and
another a bare Starlette app whose endpoint is a ``StreamingResponse`` that
sends one event and holds the connection open: the price of a held stream
without the gate, measured side by side in the same run. The load comes
from ``--generators`` processes of their own (a process may hold at most
20,000 files here), each holding its share of the connections on raw
sockets, reading every event.

1. Bare: ``--streams`` connections held; the worker's RSS before and after.
2. Gated: as many visitors join the room ``bench-held`` (paused), then hold
   its stream: 1,000, then 5,000, then ``--streams``; at each level the room
   is opened at 4 a second for 5 s and Redis's commands a second are read
   (INFO), with the worker's RSS. Then the room is paused, filled up again
   and opened at 1,000 a second: every stream must hear its turn. The
   latency is the time from its admission (Redis's clock: the session's end
   minus its length, on this host) to the turn's event reaching the
   generator.

Reports the worker's memory per held stream, bare and gated, and the
difference; Redis commands a second at each level; the turn latency's p50,
p99 and max over every stream; streams that never heard their turn; and
every ``unavailable`` event any stream got.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import redis

from queuegate import Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import connect

from .report import print_report
from .speed import most_files, uvicorn_server

ROOM, SESSION_MS = "bench-held", 3_600_000
ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1000, 5000)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the load generator: a process of its own, driven over a pipe ----------


class Generator:
    """Connections of one generator process, on raw sockets."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: list[str] = []
        self.held: list[asyncio.Task[None]] = []
        self.turns: dict[str, float] = {}  # visitor -> when its turn was heard (time.time())
        self.last: dict[str, str] = {}  # visitor -> the last event it heard, until its turn
        self.unavailable = 0
        self.opened = 0
        self.other: dict[str, int] = {}

    async def _request(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 16)
        writer.write(head)
        return reader, writer

    async def join(self, count: int) -> None:
        async def one() -> None:
            head = b"GET /held HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
            reader, writer = await self._request(head)
            response = await reader.read()
            writer.close()
            for line in response.split(b"\r\n"):
                if line.lower().startswith(b"set-cookie: qg_bench-held="):
                    self.cookies.append(line.split(b":", 1)[1].split(b";", 1)[0].strip().decode())
                    return

        for first in range(0, count, 200):
            await asyncio.gather(*(one() for _ in range(min(200, count - first))))

    async def hold(self, count: int) -> None:
        start = len(self.held)
        for cookie in self.cookies[start : start + count]:
            opened = asyncio.get_running_loop().create_future()
            self.held.append(asyncio.create_task(self._stream(cookie, opened)))
            await opened

    async def bare(self, count: int) -> None:
        """Streams of the bare app (no gate): held, their first event read."""
        for _ in range(count):
            opened = asyncio.get_running_loop().create_future()
            self.held.append(asyncio.create_task(self._stream("", opened)))
            await opened

    async def _stream(self, cookie: str, opened: asyncio.Future[None]) -> None:
        visitor = cookie.split("=", 1)[1].split(".")[0].split("~")[0] if cookie else ""
        path = f"/_queuegate/stream/{ROOM}" if cookie else "/sse"
        head = (
            f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n"
            + (f"Cookie: {cookie}\r\n" if cookie else "")
            + "\r\n"
        ).encode()
        try:
            reader, writer = await self._request(head)
        except OSError:
            opened.set_result(None)
            self.other["connect_failed"] = self.other.get("connect_failed", 0) + 1
            return
        event = b""
        try:
            while line := await reader.readline():
                if line.startswith(b"event:"):
                    event = line[6:].strip()
                    if not opened.done():
                        self.opened += 1
                        opened.set_result(None)
                    if event == b"unavailable":
                        self.unavailable += 1
                elif line.startswith(b"data:") and event != b"state" and visitor:
                    self.last[visitor] = line[5:80].decode()
                elif line.startswith(b"data:") and event == b"state":
                    if b'"active"' in line:
                        self.turns[visitor] = time.time()
                    else:
                        self.other[line[:60].decode()] = self.other.get(line[:60].decode(), 0) + 1
                    return
        finally:
            if not opened.done():
                opened.set_result(None)
            writer.close()

    def report(self) -> dict[str, Any]:
        return {
            "opened": self.opened,
            "turns": self.turns,
            "unavailable": self.unavailable,
            "other": self.other,
            "last": {v: e for v, e in self.last.items() if v not in self.turns},
        }


def generator_main(port: int, pipe: Connection) -> None:
    most_files()

    async def serve() -> None:
        generator = Generator(port)
        loop = asyncio.get_running_loop()
        while True:
            command, argument = await loop.run_in_executor(None, pipe.recv)
            if command == "join":
                await generator.join(argument)
                pipe.send(len(generator.cookies))
            elif command == "hold":
                await generator.hold(argument)
                pipe.send(generator.opened)
            elif command == "bare":
                await generator.bare(argument)
                pipe.send(generator.opened)
            elif command == "report":
                pipe.send(generator.report())
            elif command == "stop":
                for task in generator.held:
                    task.cancel()
                pipe.send(None)
                return

    asyncio.run(serve())


class Generators:
    def __init__(self, port: int, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes = []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=generator_main, args=(port, theirs), daemon=True)
            process.start()
            self.pipes.append(mine)
            self.processes.append(process)

    def ask(self, command: str, total: int = 0) -> list[Any]:
        shares = [total // len(self.pipes) + (i < total % len(self.pipes)) for i in range(len(self.pipes))]
        for pipe, share in zip(self.pipes, shares, strict=True):
            pipe.send((command, share))
        return [pipe.recv() for pipe in self.pipes]

    def close(self) -> None:
        self.ask("stop")
        for process in self.processes:
            process.join(10)


# -- the run ---------------------------------------------------------------


def bare_cost(redis_url: str, streams: int, generators: int) -> float:
    with uvicorn_server("bare", redis_url) as served:
        port, pid = served.port, served.pid
        load = Generators(port, generators)
        try:
            time.sleep(1)
            before = rss_kib(pid)
            opened: int = sum(load.ask("bare", streams))
            time.sleep(2)
            after = rss_kib(pid)
        finally:
            load.close()
    return float(after - before) / max(opened, 1)


def configure(redis_url: str, **changes: Any) -> None:
    """The operator's change (as the console makes it)."""

    async def change() -> None:
        store = Store(connect(redis_url, 5.0))
        try:
            await store.configure(ROOM, **changes)
        finally:
            await store.aclose()

    asyncio.run(change())


def commands(check: Any) -> int:
    return int(check.info("stats")["total_commands_processed"])


def gated_run(redis_url: str, streams: int, generators: int) -> dict[str, Any]:
    check: Any = redis.Redis.from_url(redis_url)
    report: dict[str, Any] = {}
    with uvicorn_server("gated", redis_url) as served:
        port, pid = served.port, served.pid
        load = Generators(port, generators)
        try:
            httpx.get(f"http://127.0.0.1:{port}/held")  # the room's first call: its settings in Redis
            configure(redis_url, status="paused")
            sum(load.ask("join", streams))
            time.sleep(1)
            before = rss_kib(pid)
            held = 0
            for level in (*[n for n in LEVELS if n < streams], streams):
                held = sum(load.ask("hold", level - held))
                time.sleep(1)
                report[f"worker_rss_mib_{level}"] = round(rss_kib(pid) / 1024, 1)
                # The line moves at 4 a second for 5 s: Redis's commands a second.
                configure(redis_url, status="open", rate=4, per=1)
                first = commands(check)
                time.sleep(5)
                report[f"redis_commands_per_s_{level}"] = round((commands(check) - first) / 5)
                configure(redis_url, status="paused")
            after = rss_kib(pid)
            report["streams_held"] = held
            report["gated_kib_per_stream"] = round((after - before) / max(held, 1), 1)
            # Everyone's turn, at 1,000 a second.
            configure(redis_url, status="open", rate=1000, per=1)
            deadline = time.monotonic() + streams / 1000 + 30
            while check.zcard(f"qg:{{{ROOM}}}:waiting") and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(3)
            report["still_waiting_at_the_end"] = int(check.zcard(f"qg:{{{ROOM}}}:waiting"))
            results = load.ask("report")
        finally:
            load.close()
    admitted = {
        member.decode(): (score - SESSION_MS) / 1000
        for member, score in check.zrange(f"qg:{{{ROOM}}}:active", 0, -1, withscores=True)
    }
    check.close()
    latencies: list[float] = []
    missed = 0
    for result in results:
        for visitor, heard in result["turns"].items():
            if visitor in admitted:
                latencies.append(heard - admitted[visitor])
    heard_turns = sum(len(r["turns"]) for r in results)
    missed = report["streams_held"] - heard_turns
    latencies.sort()

    def q(share: float) -> float:
        return (
            round(latencies[min(len(latencies) - 1, int(len(latencies) * share))] * 1000) if latencies else -1
        )

    report.update(
        {
            "turn_ms_p50": q(0.5),
            "turn_ms_p99": q(0.99),
            "turn_ms_max": q(1.0),
            "streams_without_their_turn": missed,
            "unavailable_events": sum(r["unavailable"] for r in results),
            "other_endings": {k: v for r in results for k, v in r["other"].items()},
            "without_turn_last_events": sorted(
                Counter(e[:60] for r in results for e in r["last"].values()).items(), key=lambda kv: -kv[1]
            )[:5],
        }
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.streams", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--streams", type=int, default=15_000)
    parser.add_argument("--generators", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.streams, args.generators)
    print_report(report, args.json)
    if not args.json:
        for name, met in targets(report).items():
            print(f"{'target':>28}  {name}: {'met' if met else 'MISSED'}")
    return 0


def measure(streams: int = 15_000, generators: int = 4) -> dict[str, Any]:
    """The whole run (its own Redis and workers); the report."""
    with EmbeddedServer(server_binary("path")) as server:
        bare = bare_cost(server.url, streams, generators)
        report: dict[str, Any] = {"bare_kib_per_stream": round(bare, 1)}
        report.update(gated_run(server.url, streams, generators))
    report["gated_minus_bare_kib"] = round(report["gated_kib_per_stream"] - bare, 1)
    return report


def targets(report: dict[str, Any]) -> dict[str, bool]:
    return {
        "gated - bare <= 4 KiB a stream": report["gated_minus_bare_kib"] <= 4,
        "turn p99 <= 1000 ms": 0 <= report["turn_ms_p99"] <= 1000,
        "every stream heard its turn": report["streams_without_their_turn"] == 0,
        "no unavailable event": report["unavailable_events"] == 0,
    }


if __name__ == "__main__":
    raise SystemExit(main())
