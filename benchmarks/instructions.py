"""What the gate costs a request in the app's process, in instructions: a
figure that does not move with the machine's load (wall-clock and CPU
seconds on this project's shared 2-core machines moved 2x within an hour).

    python -m benchmarks.instructions [--requests 2000] [--server] [--json]

The speed benchmark's scenarios (``python -m benchmarks``), with its app
(``benchmarks.app``) over a private Redis: an admitted visitor's
``GET /page`` (room ``bench-in``, decided from the process's copy of the
admission), a waiting visitor's poll, ``GET /_queuegate/status/bench-wait``
(at the front of a short line, answered from the copy of the line's front),
each against the bare app's ``GET /page`` without and with the cookie; and
a new visitor's join, ``GET /join`` with no cookie, each from a new
address (X-Forwarded-For), answered with the waiting page, against the bare
app sending that answer (``/_bench/sample``, the speed benchmark's
control): ``joining`` one at a time, a Redis call each (the client's work
for it counted); ``joining_together`` ``TOGETHER`` at once (gathered, as is
the sample), sharing a call as a storm's joins do in a server.

In-process (the default): the ASGI app called directly, one request after
another, under valgrind's callgrind; each batch of ``--requests`` follows a
warm-up of its own, and callgrind counts only the batch (the driver calls
``os.getppid()`` just before it, where callgrind zeroes its counters, and
``os.getpgrp()`` just after, where it dumps them). No server, no sockets:
the gate's own Python and the app's.

``--server``: uvicorn as the speed benchmark runs it (one worker, uvloop,
httptools) under callgrind, loaded from this process by ``--connections``
keep-alive connections; only the server process is counted, from a
SIGUSR2 before a batch to a SIGUSR1 after it (``benchmarks.counted``).
This adds what uvicorn does for each request and response (the headers it
parses and writes, its protocol objects, the event loop's turns).

Prints instructions per request; the gaps are gated minus bare. Needs
``valgrind`` and ``redis-server`` (or the embedded server's wheel).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import uvloop

from queuegate.embedded import EmbeddedServer, free_port, server_binary

from .report import print_report

ROOT = Path(__file__).resolve().parent.parent
# callgrind zeroes its counters when the driver calls getppid, and dumps them
# when it calls getpgrp: nothing else in a request calls either.
CALLGRIND = ["valgrind", "--tool=callgrind", "--zero-before=getppid", "--dump-before=getpgrp"]
IDLE_SECONDS = 3.0
# Each gated case is answered from one of the process's copies, without a
# call of its own: its counter in /_bench/joins, and which of the driver's.
COPIED = {"admitted": 0, "polling": 1}
COPIED_COUNTER = {"admitted": "admissions_copied", "polling": "fronts_copied"}
# Redis's timeout for the gate under callgrind (the benchmark's is 1 s): a
# call from a process fifty times slower on a busy machine is late there.
SLOW_TIMEOUT = 30.0
# Requests counted without a turn of the event loop (in-process): few, as
# a poll is answered from a view of the line good for half a second, and
# Python under callgrind runs about fifty times slower than without.
CHUNK = 5
PAUSE = 0.1  # seconds between chunks: the loop's background work runs then
SETTLE = 0.3  # seconds between a signal and a batch (the server under callgrind is slow to take it)
ADMITTED = ("/page", "bench-in")
POLLING = ("/_queuegate/status/bench-wait", "bench-wait")
SAMPLE = "/_bench/sample"  # the bare app sends a join's answer again (benchmarks.app)
TOGETHER = 10  # joins sent at once by joining_together (a storm's calls took about 12)
# (name, server, path, cookie of which room or None, requests at once: 0,
# one by one from one address; else from new addresses, so many at once).
# Polls first: a poll records liveness again once the cookie's record is a
# minute old (this visitor, as the speed benchmark's, keeps its first
# cookie). Joins before the sample: the bare app sends the last join's answer.
CASES = [
    ("polling", "gated", POLLING[0], POLLING[1], 0),
    ("admitted", "gated", ADMITTED[0], ADMITTED[1], 0),
    ("joining", "gated", "/join", None, 1),
    ("joining_together", "gated", "/join", None, TOGETHER),
    ("bare", "bare", "/page", None, 0),
    ("bare_with_cookie", "bare", "/page", "bench-in", 0),
    ("bare_sample", "bare", SAMPLE, None, 1),
    ("bare_sample_together", "bare", SAMPLE, None, TOGETHER),
]


def _dumps(directory: Path) -> list[int]:
    """The instructions of each dump callgrind made (``.1``, ``.2``, ...), in order."""
    counts = []
    for number in range(1, 100_000):
        dump = directory / f"callgrind.out.{number}"
        if not dump.exists():
            break
        for line in dump.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                counts.append(int(line.split()[1]))
                break
    return counts


# -- in-process --------------------------------------------------------------


def _commands(url: str) -> int:
    """The commands Redis has run so far (the subscription's pings too)."""
    import redis

    with redis.Redis.from_url(url) as client:
        return int(client.info("stats")["total_commands_processed"])


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An http scope as uvicorn's httptools protocol makes it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 40000),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "state": {},
    }


async def _drive(url: str, requests: int, warm: int) -> list[tuple[str, int, int, int, float]]:
    """Runs inside callgrind: each case's warm-up, then its counted requests
    in chunks of ``CHUNK`` (a join's: of ``CHUNK`` turns) that never give
    the event loop a turn but a join's, with pauses between them for the
    background's work (the subscription's pings keep the copies trusted).
    Returns, for each dump in order, its case, its requests, the Redis
    commands of its case's whole batch (pauses included), how many of the
    batch's requests a copy answered (-1: not a gated case) and its seconds
    (0.0 where the loop did not turn)."""
    from starlette.types import Message

    from . import app as bench
    from .app import bare, gated
    from .loadgen import client_address

    gate = gated(url, SLOW_TIMEOUT)
    await gate.store.warm()
    answers: list[tuple[int, dict[bytes, bytes]]] = []
    last: list[Message] = []  # the last answer's start and body

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def keep(message: Message) -> None:
        if message["type"] == "http.response.start":
            answers.append((message["status"], dict(message["headers"])))
            last[:] = [message]
        else:
            last.append(message)

    async def drop(message: Message) -> None:
        pass

    async def get(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> None:
        await app(_scope(path, headers), receive, keep)
        await asyncio.sleep(0)

    cookies: dict[str, bytes] = {}
    for path, room, visits in (("/page", "bench-in", 1), ("/wait", "bench-wait", 2)):
        for _ in range(visits):
            await get(gate, path, [(b"host", b"127.0.0.1")])
        cookie = answers[-1][1][b"set-cookie"]
        cookies[room] = cookie.split(b";", 1)[0]
    await asyncio.sleep(0.5)  # the subscription is live: admissions are copied
    clients = iter(range(1, 10_000_000))  # a new visitor's address: each from another

    def headers_of(cookie_of: str | None, together: int) -> list[tuple[bytes, bytes]]:
        headers = [(b"host", b"127.0.0.1")]
        if cookie_of is not None:
            headers.append((b"cookie", cookies[cookie_of]))
        if together:
            headers.append((b"x-forwarded-for", client_address(next(clients)).encode()))
        return headers

    dumps: list[tuple[str, int, int, int, float]] = []
    for name, server, path, cookie_of, together in CASES:
        app = gate if server == "gated" else bare
        for _ in range(warm):
            await get(app, path, headers_of(cookie_of, together))
        status = answers[-1][0]
        if status != (gate.settings.waiting_status if path in ("/join", SAMPLE) else 200):
            raise RuntimeError(f"{name}: {path} answered {status}")
        if path == "/join":  # the bare app sends this answer again
            head, body = last[0], b"".join(message["body"] for message in last[1:])
            headers = [(k, v) for k, v in head["headers"] if k != b"content-length"]
            bench.sample = bench.Sample(head["status"], headers, body)
        # A join's chunk turns the loop, and the process's own work (ticks,
        # pings) runs then too, by the clock: counted idle, and that rate
        # times a chunk's seconds taken out of its count (in_process).
        turns = together > 1 or (together == 1 and server == "gated")
        if turns:
            await asyncio.sleep(PAUSE)
            started = time.monotonic()
            os.getppid()
            await asyncio.sleep(IDLE_SECONDS)
            os.getpgrp()
            dumps.append((f"{name}:idle", 0, 0, -1, time.monotonic() - started))
        hits = gate.store.admissions.hits, gate.store.fronts.hits
        commands = _commands(url)
        chunks = []
        step = max(1, together)
        for start in range(0, requests, CHUNK * step):
            await asyncio.sleep(PAUSE)
            count = min(CHUNK * step, requests - start)
            started = time.monotonic()
            os.getppid()
            scopes = [_scope(path, headers_of(cookie_of, together)) for _ in range(count)]
            if together > 1:
                for i in range(0, count, together):
                    await asyncio.gather(*(app(one, receive, drop) for one in scopes[i : i + together]))
            else:
                for one in scopes:
                    await app(one, receive, drop)
            os.getpgrp()
            chunks.append((count, time.monotonic() - started if turns else 0.0))
        batch_commands = _commands(url) - commands - 1  # less the INFO that read it
        copied = gate.store.admissions.hits - hits[0], gate.store.fronts.hits - hits[1]
        from_copies = copied[COPIED[name]] if name in COPIED else -1
        dumps += [(name, count, batch_commands, from_copies, seconds) for count, seconds in chunks]
    await gate.aclose()
    return dumps


def _kept(directory: str, keep: str | None, prefix: str) -> None:
    """Copies callgrind's dumps to ``keep`` (for callgrind_annotate)."""
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for dump in Path(directory).glob("callgrind.out*"):
            shutil.copy(dump, Path(keep) / f"{prefix}.{dump.name}")


def driven(module: str, arguments: list[str], directory: str) -> tuple[list[Any], list[int]]:
    """Run ``module``'s driver (``--driver`` and ``arguments``) under
    callgrind, its dumps in ``directory``: the order of the batches it
    printed last, and each batch's instructions."""
    command = [
        *CALLGRIND, f"--callgrind-out-file={directory}/callgrind.out", sys.executable, "-m",
        module, "--driver", *arguments,
    ]  # fmt: skip
    # The same dicts' layouts in every run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the driver failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), _dumps(Path(directory))


def in_process(url: str, requests: int, warm: int, keep: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="queuegate-instructions-") as directory:
        arguments = [url, "--requests", str(requests), "--warm", str(warm)]
        order, counts = driven("benchmarks.instructions", arguments, directory)
        _kept(directory, keep, "in-process")
    totals: dict[str, float] = {}
    idle: dict[str, float] = {}  # a case's process work a second, when it turns the loop
    commands: dict[str, float] = {}  # and shares answered from copies
    for (name, _, batch_commands, from_copies, seconds), count in zip(order, counts, strict=True):
        if name.endswith(":idle"):
            idle[name.removesuffix(":idle")] = count / seconds
            continue
        totals[name] = totals.get(name, 0) + count - idle.get(name, 0.0) * seconds
        commands[f"{name}_redis_commands"] = round(batch_commands / requests, 3)
        if from_copies >= 0:
            commands[f"{name}_from_copies"] = round(from_copies / requests, 3)
    return {**{name: round(total / requests) for name, total in totals.items()}, **commands}


# -- under uvicorn -------------------------------------------------------------


async def _load(port: int, path: str, headers: dict[str, str], requests: int, connections: int) -> None:
    """``requests`` GETs from ``connections`` keep-alive connections; each
    answer must be a 200."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()

    async def connection(count: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(count):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"{path}: {head.splitlines()[0]!r}")
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
        finally:
            writer.close()

    shares = [requests // connections + (i < requests % connections) for i in range(connections)]
    await asyncio.gather(*(connection(share) for share in shares if share))


def _cookie(port: int, path: str, room: str, visits: int) -> str:
    import httpx

    value = ""
    for _ in range(visits):
        value = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=60).cookies[f"qg_{room}"]
    return f"qg_{room}={value}"


def _copied(port: int) -> dict[str, int]:
    """The server's counts of requests answered from its copies (benchmarks.app)."""
    import httpx

    return dict(httpx.get(f"http://127.0.0.1:{port}/_bench/joins", timeout=60).json())


def _serve(mode: str, url: str, directory: str) -> tuple[subprocess.Popen[bytes], int]:
    import httpx

    port = free_port()
    env = {
        **os.environ,
        "QGDEV_BENCH_MODE": mode,
        "QUEUEGATE_REDIS_URL": url,
        "QGDEV_BENCH_TIMEOUT": str(SLOW_TIMEOUT),
    }
    command = [
        *CALLGRIND,
        f"--callgrind-out-file={directory}/callgrind.out",
        sys.executable, "-m", "uvicorn", "benchmarks.counted:app", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/_bench/joins", timeout=30)
            return process, port
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"uvicorn ({mode}) under callgrind did not start") from None
            time.sleep(0.5)


def _counted(
    process: subprocess.Popen[bytes], directory: Path, batch: Coroutine[Any, Any, None]
) -> tuple[int, float]:
    """The server's instructions over ``batch``, zeroed by a SIGUSR2 and
    dumped by a SIGUSR1 (see benchmarks.counted), and the seconds between."""
    dumps = len(_dumps(directory))
    started = time.monotonic()
    process.send_signal(signal.SIGUSR2)
    time.sleep(SETTLE)
    asyncio.run(batch)
    time.sleep(SETTLE)
    process.send_signal(signal.SIGUSR1)
    seconds = time.monotonic() - started
    deadline = time.monotonic() + 120
    while len(counts := _dumps(directory)) == dumps:
        if time.monotonic() > deadline:
            raise RuntimeError("callgrind did not dump its counts")
        time.sleep(0.2)
    return counts[-1], seconds


def under_uvicorn(
    url: str, requests: int, warm: int, connections: int, keep: str | None = None
) -> dict[str, Any]:
    report: dict[str, Any] = {}
    cookies: dict[str, str] = {}
    for mode in ("gated", "bare"):  # the bare app is sent the gated one's cookie too
        with tempfile.TemporaryDirectory(prefix="queuegate-instructions-") as directory:
            process, port = _serve(mode, url, directory)
            try:
                if mode == "gated":
                    cookies["bench-in"] = _cookie(port, "/page", "bench-in", 1)
                    cookies["bench-wait"] = _cookie(port, "/wait", "bench-wait", 2)
                    time.sleep(1.0)  # the subscription is live: admissions are copied
                # The server's own work meanwhile (the gate's subscription
                # and ticks), per second: a batch under callgrind lasts fifty
                # times longer than in a server at full speed.
                idle, seconds = _counted(process, Path(directory), asyncio.sleep(IDLE_SECONDS))
                per_second = idle / seconds
                report[f"idle_per_second_{mode}"] = round(per_second)
                for name, server, path, room, together in CASES:
                    if server != mode or together:
                        continue  # (new visitors' joins: in-process only)
                    headers = {} if room is None else {"Cookie": cookies[room]}
                    asyncio.run(_load(port, path, headers, warm, connections))
                    batch = _load(port, path, headers, requests, connections)
                    commands = _commands(url)
                    copied = _copied(port)
                    total, seconds = _counted(process, Path(directory), batch)
                    if name in COPIED_COUNTER:
                        counter = COPIED_COUNTER[name]
                        share = (_copied(port)[counter] - copied[counter]) / requests
                        report[f"{name}_from_copies"] = round(share, 3)
                    report[name] = round((total - per_second * seconds) / requests)
                    report[f"{name}_raw"] = round(total / requests)
                    report[f"{name}_redis_commands"] = round((_commands(url) - commands - 1) / requests, 3)
            finally:
                process.terminate()
                process.wait(60)
                _kept(directory, keep, mode)
    return report


def _with_gaps(counts: dict[str, Any]) -> dict[str, Any]:
    gaps = {
        "admitted_gap": counts["admitted"] - counts["bare"],
        "polling_gap": counts["polling"] - counts["bare"],
    }
    if "joining" in counts:  # the gate's own work for a join: over the bare app sending its answer
        gaps["joining_gap"] = counts["joining"] - counts["bare_sample"]
        gaps["joining_together_gap"] = counts["joining_together"] - counts["bare_sample_together"]
    return {**counts, **gaps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--requests", type=int, default=1000, help="counted requests a case")
    parser.add_argument("--warm", type=int, default=500, help="requests before each counted batch")
    parser.add_argument("--server", action="store_true", help="count a uvicorn server, not the app alone")
    parser.add_argument("--connections", type=int, default=32, help="with --server")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", help="a directory to copy callgrind's dumps to (callgrind_annotate)")
    parser.add_argument("--driver", help=argparse.SUPPRESS)  # the process callgrind runs
    args = parser.parse_args(argv)
    if args.driver:
        # On uvloop, as the speed benchmark's servers run (a join's awaits
        # turn the loop: asyncio's own loop is Python, uvloop's is C).
        print(json.dumps(uvloop.run(_drive(args.driver, args.requests, args.warm))))
        return 0
    if not shutil.which("valgrind"):
        parser.error("needs valgrind")
    with EmbeddedServer(server_binary("path")) as server:
        if args.server:
            counts = under_uvicorn(server.url, args.requests, args.warm, args.connections, args.keep)
        else:
            counts = in_process(server.url, args.requests, args.warm, args.keep)
    report = {"where": "uvicorn" if args.server else "in-process", "requests": args.requests}
    print_report({**report, **_with_gaps(counts)}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
