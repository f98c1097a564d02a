"""Leaving, measured where it must show: how soon a leaver's stream ends at
any rank of a long line, and how soon every process stops passing a
removed visitor on its copy of the admission, also after ``FLUSHALL``.

    python -m benchmarks.leaving [--samples 10] [--trials 30] [--flush-trials 10] [--json]

Three uvicorn servers of one worker each (three app processes, each on a
port of its own so that each can be asked) serve the gated benchmark app
with a probe of the process's copies of admissions (``CopiesSeen`` in
benchmarks/app.py: whether it would pass a visitor on its copy alone now,
and when, on the clock every process shares, it dropped that copy). One
embedded Redis.

1. Streams. ``bench-leave`` (nobody admitted) holds a line of 12,000,
   ``--held`` of whom hold their stream open all along. For each rank of
   ``RANKS``, ``--samples`` times each way, the visitor standing at that
   rank opens its stream (on each server in turn), reads its place, and
   leaves: by its own ``POST /_queuegate/leave/ROOM`` (to its stream's
   server or another), or by the operator's remove (``Store.leave``, what
   ``queuegate remove`` calls) from this process. The figure is the time
   from sending the leave to the stream's connection closing (its last
   event, ``state`` none, comes just before).
2. A removed visitor. ``bench-removed`` is full (40 admitted, 100
   waiting) and every process holds a copy of each admission. ``--trials``
   times one of them is removed (``Store.leave`` with the room's name, as
   the console and the back office call it): the time from sending it to
   each process dropping its copy, by the process's own clock; then one
   request a process with the visitor's cookie, which must not pass.
3. After ``FLUSHALL`` (data lost while Redis stays up), ``--flush-trials``
   times each: visitors admitted and copied anew, then ``FLUSHALL`` and at
   once ``queuegate remove ROOM VISITOR`` (the console, a process of its
   own; from just before its call to each process dropping its copy: Redis
   no longer knows the room nor the visitor); and ``FLUSHALL`` alone (from
   it to each process dropping its copies: the room's next tick finds its
   incarnation changed, see queuegate/ticker.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
import redis.asyncio as aioredis

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import connect
from queuegate.ticker import RENEW
from queuegate.tokens import Tokens

from .app import ROOMS, SECRET
from .report import print_report
from .speed import ROOT, most_files, uvicorn_server

LINE = next(room for room in ROOMS if room.name == "bench-leave")
FULL = next(room for room in ROOMS if room.name == "bench-removed")
RANKS = (1, 100, 1000, 10_000)
LINE_LENGTH = 12_000
SERVERS = 3
ENDED_WITHIN = 5.0  # seconds a stream is given to end before it counts as not ended
TOKENS = Tokens([SECRET], 86400)


def quantiles(values: Sequence[float]) -> list[float]:
    """p50, p99 and max in ms of durations in seconds; [-1, -1, -1] when
    there are none."""
    if not values:
        return [-1.0, -1.0, -1.0]
    ordered = sorted(values)

    def at(share: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000, 1)

    return [at(0.5), at(0.99), at(1.0)]


def sse_events(lines: Sequence[bytes]) -> list[tuple[str, str]]:
    """(event, data) pairs from Server-Sent Events lines, in order (chunk
    sizes and comments ignored)."""
    events: list[tuple[str, str]] = []
    event = ""
    for line in lines:
        if line.startswith(b"event:"):
            event = line[6:].strip().decode()
        elif line.startswith(b"data:") and event:
            events.append((event, line[5:].strip().decode()))
            event = ""
    return events


def cookie(room: Room, visitor: str) -> str:
    return f"qg_{room.name}={TOKENS.issue(room.name, visitor)}"


# -- 1. streams ----------------------------------------------------------


class HeldStream:
    """A visitor's stream on a raw socket: its first event read; then every
    line, and when its last event and its end came (``time.monotonic()``)."""

    def __init__(self, port: int, visitor: str) -> None:
        self.port, self.visitor = port, visitor
        self.lines: list[bytes] = []
        self.last_event_at = 0.0
        self.closed_at = 0.0
        self.first: tuple[str, str] = ("", "")
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 16)
        self._writer.write(
            (
                f"GET /_queuegate/stream/{LINE.name} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n"
                f"Connection: close\r\nCookie: {cookie(LINE, self.visitor)}\r\n\r\n"
            ).encode()
        )
        while not sse_events(self.lines):
            line = await reader.readline()
            if not line:
                break
            self.lines.append(line)
        events = sse_events(self.lines)
        self.first = events[0] if events else ("", "")
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                self.lines.append(line)
                if line.startswith(b"data:"):
                    self.last_event_at = time.monotonic()
        except OSError:
            pass
        self.closed_at = time.monotonic()

    async def ended(self, seconds: float) -> bool:
        assert self._task is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await asyncio.shield(self._task)
        return self._task.done()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._writer.close()


async def streams(redis_url: str, ports: Sequence[int], samples: int, held: int) -> dict[str, Any]:
    check: Any = aioredis.Redis.from_url(redis_url)
    operator = Store(connect(redis_url, 5.0))
    clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) for port in ports]
    waiting_key = f"qg:{{{LINE.name}}}:waiting"
    report: dict[str, Any] = {"line": LINE_LENGTH}
    background: list[HeldStream] = []
    ended: list[float] = []
    not_ended = wrong_rank = 0
    try:
        for start in range(0, LINE_LENGTH + 1, 5000):
            batch = [f"line{i:06d}" for i in range(start, min(LINE_LENGTH + 1, start + 5000))]
            await operator.enter_many(LINE, batch)  # the first is let in: the line is the rest
        standing = [m.decode() for m in await check.zrange(waiting_key, 0, -1)]
        step = max(1, len(standing) // max(held, 1))
        for i, visitor in enumerate(standing[150::step][:held]):
            stream = HeldStream(ports[i % len(ports)], visitor)
            await stream.open()
            background.append(stream)
        report["held_open_all_along"] = len(background)
        for rank in RANKS:
            for way in ("leave", "remove"):
                took: list[float] = []
                for k in range(samples):
                    visitor = (await check.zrange(waiting_key, rank - 1, rank - 1))[0].decode()
                    stream = HeldStream(ports[k % len(ports)], visitor)
                    await stream.open()
                    event, data = stream.first
                    if event != "waiting" or json.loads(data).get("position") != rank:
                        wrong_rank += 1
                    sent = time.monotonic()
                    if way == "leave":
                        answer = await clients[2 * k % len(clients)].post(
                            f"/_queuegate/leave/{LINE.name}",
                            headers={
                                "Cookie": cookie(LINE, visitor),
                                "Sec-Fetch-Site": "same-origin",
                                "Accept": "application/json",
                            },
                        )
                        assert answer.status_code == 200, answer.text
                    else:
                        assert await operator.leave(LINE, visitor, who="benchmark")
                    if await stream.ended(ENDED_WITHIN):
                        took.append(stream.closed_at - sent)
                        ended.append(stream.closed_at - sent)
                        if sse_events(stream.lines)[-1][0] != "state":
                            not_ended += 1  # closed without saying why
                    else:
                        not_ended += 1
                    stream.close()
                report[f"{way}_rank_{rank}_ms_p50_p99_max"] = quantiles(took)
        report["streams_not_ended_within_5s"] = not_ended
        report["streams_not_at_the_rank_expected"] = wrong_rank
        report["stream_end_ms_max"] = quantiles(ended)[2]
    finally:
        for stream in background:
            stream.close()
        await asyncio.gather(*(client.aclose() for client in clients))
        await operator.aclose()
        await check.aclose()
    return report


# -- 2 and 3. removed visitors, every process's copy ---------------------


class ConsoleRemove:
    """``queuegate remove`` for a visitor, the console a process of its own,
    started ahead (its imports done) and told when to call."""

    def __init__(self, redis_url: str, visitor: str) -> None:
        code = (
            "import sys, time\n"
            "from queuegate.cli import main\n"
            "print('ready', file=sys.stderr, flush=True)\n"
            "sys.stdin.readline()\n"
            "print(time.monotonic(), file=sys.stderr, flush=True)\n"
            "sys.exit(main(sys.argv[1:]))\n"
        )
        command = [sys.executable, "-c", code, "--redis", redis_url, "remove", FULL.name, visitor]
        self.visitor = visitor
        pipe = subprocess.PIPE
        self.process = subprocess.Popen(command, cwd=ROOT, stdin=pipe, stdout=pipe, stderr=pipe, text=True)
        assert self.process.stderr is not None
        assert self.process.stderr.readline().strip() == "ready"

    def run(self) -> tuple[float, str]:
        """Call now: the time (``time.monotonic()``, the same clock in every
        process) just before the console's call, and what it answered (its
        error, if it failed)."""
        out, err = self.process.communicate("go\n", timeout=30)
        said = (out.strip() or err.strip().splitlines()[-1]).replace(self.visitor, "V")
        return float(err.split()[0]), said


class Processes:
    """The three app processes: each one's requests and its probe of copies."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) for port in ports]

    async def passes(self, index: int, visitor: str) -> bool:
        """A request of ``visitor`` to the room reaches the app."""
        answer = await self.clients[index].get("/removed", headers={"Cookie": cookie(FULL, visitor)})
        return answer.status_code == 200 and answer.text == "ok"

    async def probe(self, index: int, visitors: Sequence[str]) -> dict[str, Any]:
        answer = await self.clients[index].get(
            f"/_bench/copies/{FULL.name}", params={"v": ",".join(visitors)}
        )
        probed: dict[str, Any] = answer.json()
        return probed

    async def copied(self, visitors: Sequence[str]) -> None:
        """Every process holds a copy of every visitor's admission (each
        asked again until its probe says so)."""
        deadline = time.monotonic() + 20
        for index in range(len(self.clients)):
            missing = list(visitors)
            while missing:
                assert time.monotonic() < deadline, f"process {index} copied none of {missing}"
                for visitor in missing:
                    assert await self.passes(index, visitor), visitor
                held = (await self.probe(index, missing))["held"]
                missing = [v for v in missing if not held[v]]
                if missing:
                    await asyncio.sleep(0.05)

    async def dropped(self, visitors: Sequence[str], seconds: float = 5.0) -> list[dict[str, float]]:
        """When each process dropped its copy of each visitor (those it did
        within ``seconds``)."""
        deadline = time.monotonic() + seconds
        while True:
            seen = [(await self.probe(i, visitors))["dropped"] for i in range(len(self.clients))]
            if all(len(one) == len(visitors) for one in seen) or time.monotonic() > deadline:
                return seen
            await asyncio.sleep(0.02)

    async def lost(self) -> int:
        """Subscriptions the processes lost so far (copies dropped whole)."""
        return sum([(await self.probe(i, []))["lost"] for i in range(len(self.clients))])

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients))


async def removals(redis_url: str, ports: Sequence[int], trials: int, flush_trials: int) -> dict[str, Any]:
    check: Any = aioredis.Redis.from_url(redis_url)
    operator = Store(connect(redis_url, 5.0))
    processes = Processes(ports)
    capacity = FULL.capacity or 0
    try:
        # 2. A full room, a line behind it, every admission copied everywhere.
        admitted = [f"in{i:03d}" for i in range(capacity)]
        for visitor in admitted:
            assert await processes.passes(0, visitor)
        await operator.enter_many(FULL, [f"waits{i:03d}" for i in range(100)])
        await processes.copied(admitted)
        delays: list[float] = []
        missed = passed = 0
        for visitor in admitted[:trials]:
            sent = time.monotonic()
            await operator.leave(FULL.name, visitor, who="benchmark")
            for one in await processes.dropped([visitor]):
                if visitor in one:
                    delays.append(one[visitor] - sent)
                else:
                    missed += 1
            passed += sum([await processes.passes(i, visitor) for i in range(len(ports))])
        report: dict[str, Any] = {
            "removed_trials": min(trials, capacity),
            "removed_copy_dropped_ms_p50_p99_max": quantiles(delays),
            "removed_copies_not_dropped": missed,
            "removed_requests_passed_after": passed,
        }
        # 3. FLUSHALL: with a remove at once, and alone.
        after_remove: list[float] = []
        alone: list[float] = []
        missed_flush = by_tick = 0
        answers: list[str] = []
        for trial in range(flush_trials):
            for way in ("remove", "alone"):
                await check.flushall()
                # Every process's tick finds the room's data gone and revokes
                # its copies (up to a lease later for those not holding it):
                # copies made before that would be dropped by it.
                await asyncio.sleep(LEASE_SETTLES)
                visitors = [f"f{trial}{way}{i}" for i in range(5)]
                for visitor in visitors:
                    assert await processes.passes(0, visitor)
                await processes.copied(visitors)
                await asyncio.sleep(0.3)  # each process ticked the room and knows its incarnation
                if way == "remove":
                    console = await asyncio.to_thread(ConsoleRemove, redis_url, visitors[0])
                    await check.flushall()
                    sent, said = await asyncio.to_thread(console.run)
                    answers.append(said)
                    for one in await processes.dropped(visitors[:1]):
                        if visitors[0] not in one:
                            missed_flush += 1
                        elif one[visitors[0]] < sent:
                            by_tick += 1  # a tick came between FLUSHALL and the remove
                        else:
                            after_remove.append(one[visitors[0]] - sent)
                else:
                    sent = time.monotonic()
                    await check.flushall()
                    for one in await processes.dropped(visitors):
                        missed_flush += len(visitors) - len(one)
                        alone.extend(at - sent for at in one.values())
        report.update(
            {
                "flush_trials": flush_trials,
                "flush_then_remove_copy_dropped_ms_p50_p99_max": quantiles(after_remove),
                "flush_then_remove_dropped_by_a_tick_first": by_tick,
                "flush_then_remove_console_said": sorted(set(answers)),
                "flush_alone_copy_dropped_ms_p50_p99_max": quantiles(alone),
                "flush_copies_not_dropped_within_5s": missed_flush,
                "subscriptions_lost": await processes.lost(),
            }
        )
    finally:
        await processes.aclose()
        await operator.aclose()
        await check.aclose()
    return report


LEASE_SETTLES = 2.5  # seconds: every process ticked (a ticker's lease is 2 s) since the last FLUSHALL


# -- the run -------------------------------------------------------------


def measure(samples: int = 10, trials: int = 30, flush_trials: int = 10, held: int = 500) -> dict[str, Any]:
    """The whole run (its own Redis and servers); the report."""
    most_files()
    with EmbeddedServer(server_binary("path")) as server, contextlib.ExitStack() as stack:
        env = {"QGDEV_BENCH_COPIES": "1"}
        ports = [
            stack.enter_context(uvicorn_server("gated", server.url, env=env)).port for _ in range(SERVERS)
        ]
        report = asyncio.run(streams(server.url, ports, samples, held))
        report.update(asyncio.run(removals(server.url, ports, trials, flush_trials)))
    return report


def targets(report: dict[str, Any]) -> dict[str, bool]:
    removed = report["removed_copy_dropped_ms_p50_p99_max"][2]
    flush_removed = report["flush_then_remove_copy_dropped_ms_p50_p99_max"][2]
    alone = report["flush_alone_copy_dropped_ms_p50_p99_max"][2]
    flush_missed = report["flush_copies_not_dropped_within_5s"]
    return {
        "a leaver's stream ends within 1 s at any rank": report["streams_not_ended_within_5s"] == 0
        and 0 <= report["stream_end_ms_max"] <= 1000,
        "a removed visitor is refused by every process within 100 ms": report["removed_copies_not_dropped"]
        == report["removed_requests_passed_after"]
        == 0
        and 0 <= removed <= 100,
        "... including after FLUSHALL": flush_missed == 0 and 0 <= flush_removed <= 100,
        f"FLUSHALL alone: every copy dropped by the room's next tick ({RENEW * 1000:.0f} + 100 ms)": (
            flush_missed == 0 and 0 <= alone <= RENEW * 1000 + 100
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.leaving", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--samples", type=int, default=10, help="leaves of each kind at each rank")
    parser.add_argument("--held", type=int, default=500, help="other streams held open all along")
    parser.add_argument("--trials", type=int, default=30, help="removes of a copied admission (at most 40)")
    parser.add_argument("--flush-trials", type=int, default=10, help="FLUSHALL trials of each kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = measure(args.samples, args.trials, args.flush_trials, args.held)
    met = targets(report)
    print_report({**report, "targets_met": all(met.values())}, args.json)
    if not args.json:
        for name, ok in met.items():
            print(f"target  {name}: {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
