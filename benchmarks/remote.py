"""What a Redis across the network adds to an admitted visitor's request.

    python -m benchmarks.remote [--delay-ms 1.0] [--seconds 4] [--json]

Managed Redis services answer in 0.3-1 ms; on loopback Redis answers in tens
of microseconds. This kernel has no netem (``tc qdisc ... netem``: "qdisc
kind is unknown"), so Redis is put ``--delay-ms`` away by a delaying TCP
proxy in a process of its own: every chunk is passed on half the delay later
in each direction, in order, without waiting for the chunk before it (so
pipelining still works, as across a real network). The proxy's round trip is
measured and printed (PING through it).

The same trivial app is served bare, gated, and gated with
``local_admissions=False`` (every request asks Redis, as before 0.2), and
loaded with one connection: the p50 an admitted visitor's request takes and
what the gate adds to it (the issue's figure). Then again with 4
connections, a closed loop that keeps the one uvicorn worker busy: there a
request also waits for the 3 ahead of it, so what the gate adds shows about
4 times its CPU cost per request.
"""

from __future__ import annotations

import argparse
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from queuegate.embedded import EmbeddedServer, free_port, server_binary

from .loadgen import Result, run_load
from .report import print_report
from .speed import ROOT, Served, cookie, uvicorn_server

CONNECTIONS = (1, 4)


def _delayed(source: socket.socket, sink: socket.socket, delay: float) -> None:
    """Pass what ``source`` sends on to ``sink``, each chunk ``delay`` seconds
    after it came, in order; a reader thread and a sender thread, so the
    chunks behind one are not held up by its wait."""
    chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def read() -> None:
        while data := source.recv(65536):
            chunks.put((time.perf_counter() + delay, data))
        chunks.put((time.perf_counter() + delay, b""))

    def send() -> None:
        while True:
            due, data = chunks.get()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not data:
                sink.close()
                return
            sink.sendall(data)

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=send, daemon=True).start()


def _serve_proxy(port: int, target: int, delay: float) -> None:
    # Threads, not asyncio: the event loop's timers are millisecond-grained
    # (a 0.5 ms delay became 1.2 ms), time.sleep is precise to tens of us.
    with socket.create_server(("127.0.0.1", port)) as listener:
        while True:
            client, _ = listener.accept()
            upstream = socket.create_connection(("127.0.0.1", target))
            for one in (client, upstream):
                one.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _delayed(client, upstream, delay)
            _delayed(upstream, client, delay)


@contextmanager
def delaying_proxy(target: int, delay_ms: float) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.remote", "--proxy", str(port), str(target), str(delay_ms)]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the delaying proxy did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def round_trip_ms(port: int, count: int = 200) -> float:
    with redis.Redis(port=port) as client:
        client.ping()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            client.ping()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=1.0, help="round trip the proxy adds (ms)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--proxy", nargs=3, help=argparse.SUPPRESS)  # the proxy process itself
    args = parser.parse_args(argv)
    if args.proxy:
        port, target, delay_ms = args.proxy
        _serve_proxy(int(port), int(target), float(delay_ms) / 2000)
        return 0
    report: dict[str, object] = {"delay_ms": args.delay_ms}
    with EmbeddedServer(server_binary("path")) as server, delaying_proxy(server.port, args.delay_ms) as port:
        report["redis_round_trip_ms"] = round(round_trip_ms(port), 3)
        remote = f"redis://127.0.0.1:{port}/0"
        asking = {"QUEUEGATE_LOCAL_ADMISSIONS": "false"}
        with (
            uvicorn_server("bare", remote) as bare,
            uvicorn_server("gated", remote) as gated,
            uvicorn_server("gated", remote, env=asking) as asks,
        ):
            servers: dict[str, tuple[Served, dict[str, str]]] = {
                "bare": (bare, {}),
                "gated": (gated, {}),
                "asking": (asks, {}),
            }
            for name, (served, headers) in servers.items():
                if name != "bare":
                    headers["Cookie"] = cookie(served.port, "/page", "bench-in", 1)
            for connections in CONNECTIONS:
                runs: dict[str, list[Result]] = {name: [] for name in servers}
                for _ in range(args.rounds):
                    for name, (served, headers) in servers.items():
                        load = run_load(served.port, "/page", args.seconds, connections, headers, False)
                        runs[name].append(load)
                suffix = "" if connections == 1 else f"_{connections}_connections"
                report.update(figures(runs, suffix))
    print_report(report, args.json)
    if not args.json:
        added = report["added_p50_ms"]
        print(f"{'target':>40}  added_p50_ms <= 0.1: {'met' if added <= 0.1 else 'MISSED'}")  # type: ignore[operator]
    return 0


def figures(runs: dict[str, list[Result]], suffix: str) -> dict[str, object]:
    """Medians over the rounds; what the gate adds is taken round by round
    against the bare run of the same round."""
    med = statistics.median
    bare = runs["bare"]
    out: dict[str, object] = {f"bare_p50_ms{suffix}": round(med(r.p50_ms for r in bare), 3)}
    for name, label in (("gated", ""), ("asking", "asking_redis_")):
        out[f"{label}gated_p50_ms{suffix}"] = round(med(r.p50_ms for r in runs[name]), 3)
        out[f"{label}added_p50_ms{suffix}"] = round(
            med(g.p50_ms - b.p50_ms for b, g in zip(bare, runs[name], strict=True)), 3
        )
        out[f"{label}gated_p99_ms{suffix}"] = round(med(r.p99_ms for r in runs[name]), 3)
    out[f"errors{suffix}"] = sum(r.errors for one in runs.values() for r in one)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
