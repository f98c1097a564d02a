"""How fast an admission's early end reaches the copies in other processes.

    python -m benchmarks.revocation [--processes 4] [--visitors 500] [--json]

Each of ``--processes`` worker processes lets the same visitors in (the first
admits them, all of them copy the answer, see queuegate/admissions.py) and
notes, on the system-wide monotonic clock, when it hears each one's end.
The main process then releases the visitors one by one (``Store.release``,
5 ms apart) and notes when each release was sent. The figure is the time
from sending a release to the moment each process dropped its copy: the
window in which a process could still let the released visitor through.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import connect

from .report import print_report
from .speed import ROOT

ROOM = Room("drop", paths=["/drop"], capacity=1_000_000, session=600.0)


async def worker(url: str, visitors: int) -> None:
    """Copy every visitor's admission, then report when each end was heard."""
    store = Store(connect(url, 5.0))
    heard: dict[str, float] = {}
    everyone = asyncio.Event()
    revoke = store.admissions.revoke

    def noted(room: str, visitor: str, at_ms: int) -> None:
        heard.setdefault(visitor, time.monotonic())
        revoke(room, visitor, at_ms)
        if len(heard) == visitors:
            everyone.set()

    store.admissions.revoke = noted  # type: ignore[method-assign]
    store.invalidations.start()
    for _ in range(1000):  # subscribed within 10 s
        if store.invalidations.live:
            break
        await asyncio.sleep(0.01)
    for i in range(visitors):
        outcome = await store.enter(ROOM, f"v{i}")
        assert outcome.state == "active", outcome
    copied = sum(store.admissions.admitted_until(ROOM.name, f"v{i}") is not None for i in range(visitors))
    print(json.dumps({"ready": copied}), flush=True)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            await everyone.wait()
    print(json.dumps({"heard": heard}), flush=True)
    await store.aclose()


async def release_all(url: str, visitors: int) -> dict[str, float]:
    store = Store(connect(url, 5.0))
    sent: dict[str, float] = {}
    for i in range(visitors):
        sent[f"v{i}"] = time.monotonic()
        assert await store.release(ROOM, f"v{i}")
        await asyncio.sleep(0.005)
    await store.aclose()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.revocation", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--visitors", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # a worker process itself
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(worker(args.worker[0], int(args.worker[1])))
        return 0
    with EmbeddedServer(server_binary("path")) as server:
        command = [sys.executable, "-m", "benchmarks.revocation", "--worker", server.url, str(args.visitors)]
        workers = [
            subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            for _ in range(args.processes)
        ]
        copied = [json.loads(w.stdout.readline())["ready"] for w in workers if w.stdout]
        sent = asyncio.run(release_all(server.url, args.visitors))
        heard = [json.loads(w.stdout.readline())["heard"] for w in workers if w.stdout]
        for w in workers:
            w.wait(10)
    delays = sorted((one[v] - at) * 1000 for one in heard for v, at in sent.items() if v in one)
    missed = args.processes * args.visitors - len(delays)
    report = {
        "processes": args.processes,
        "visitors": args.visitors,
        "copied": sum(copied),
        "missed": missed,
        "p50_ms": round(statistics.median(delays), 3),
        "p99_ms": round(delays[int(len(delays) * 0.99) - 1], 3),
        "max_ms": round(delays[-1], 3),
    }
    print_report(report, args.json)
    if not args.json:
        print(f"{'target':>10}  p99_ms <= 10: {'met' if report['p99_ms'] <= 10 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
