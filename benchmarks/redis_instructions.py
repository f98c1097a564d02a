"""What each operation costs Redis, in instructions: a figure that does not
move with the machine's load, where time on a shared machine moved by a
factor of three from one day to another.

    python -m benchmarks.redis_instructions [--waiting 5000] [--json] [--keep DIR]

Runs ``redis-server`` (from the PATH) under valgrind's callgrind, counting
only inside ``EVALSHA`` and ``FCALL`` (the script, the commands it calls and
its reply),
and only around each measured batch: in a room of ``--waiting`` visitors
(nobody is let in), newcomers joining 30 to a call as a busy process sends
them (``Store.join_many``), each from a new client and then with no client
key, and alone (one a call: a call's shared part paid in full); newcomers
joining one by one (``Store.enter``: the quick join);
polls of a visitor in the line asked in full; and scripts made of a
poll's and a join's first parts alone, ending in ``return 1`` (what a call
pays to build its parts' functions before its own work). Prints
instructions per join, poll or call. Compare runs of one server build:
Debian's ``redis-server`` 7.0.15 is what the figures in docs/performance.md come from.
Needs ``valgrind``. ``--keep DIR`` keeps each batch's callgrind output there
(``DIR/join_together.callgrind``) for ``callgrind_annotate``; a
``redis-server`` built with its symbols names Lua's own functions too.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import redis.asyncio as aioredis

from queuegate import Room, Store
from queuegate.embedded import free_port
from queuegate.scripts import SCRIPTS, source

from .report import print_report

ROOM = Room("cost", paths=["/cost"], rate=1, per=3_600_000, abandon=3_600_000)
TOGETHER = 30
# Each batch is a multiple of 50 script calls: Redis steps Lua's garbage
# collector at every 50th call, and a batch of 32 calls held one step or
# none (about 500 instructions a join either way).
JOINS = 1500
POLLS = 300
# The parts a quick poll runs before its own (inside.lua and quick.lua do
# work of their own, so they are left out).
POLL_PARTS = ("clock", "liveness", "estimate", "waiting")


class Callgrind:
    """redis-server under callgrind; ``count`` zeroes the counters, runs a
    batch and reads how many instructions it took inside EVALSHA."""

    def __init__(self, directory: str, keep: Path | None = None) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=evalShaCommand",
                "--toggle-collect=fcallCommand",
                f"--callgrind-out-file={self.directory}/callgrind.out",
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.process.pid)], check=True, capture_output=True)

    async def count(self, name: str, batch: Callable[[], Awaitable[int]]) -> tuple[int, int]:
        """(instructions, operations) of ``batch``, which returns how many
        operations it made; its output kept as ``<keep>/<name>.callgrind``."""
        self._control("-z")
        done = await batch()
        before = set(self.directory.glob("callgrind.out*"))
        self._control("-d")
        dump = next(iter(set(self.directory.glob("callgrind.out*")) - before))
        totals = [line for line in dump.read_text().splitlines() if line.startswith(("totals:", "summary:"))]
        if self.keep is not None:
            shutil.copyfile(dump, self.keep / f"{name}.callgrind")
        return int(totals[0].split()[1]), done

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


async def wait_ready(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    for _ in range(300):
        try:
            await client.ping()
            break
        except Exception:
            await asyncio.sleep(0.2)
    await client.aclose()


async def measure(counter: Callgrind, waiting: int) -> dict[str, float]:
    await wait_ready(counter.url)
    store = Store(aioredis.Redis.from_url(counter.url), timeout=120.0, local_admissions=False)
    await store.enter(ROOM, "first")  # takes the one token: nobody else is let in
    for start in range(0, waiting, 1000):
        await store.enter_many(ROOM, [f"w{i:08d}" for i in range(start, min(waiting, start + 1000))])
    # Every script once, outside the counts (loading one is not a call's
    # cost), and a poll that settles the room.
    poller = f"w{waiting // 2:08d}"
    await store.enter(ROOM, poller, join=False)
    await store.join_many(ROOM, [("warm", "192.0.2.1")])
    batch_number = 0

    def joins(clients: bool, together: int = TOGETHER) -> Callable[[], Awaitable[int]]:
        async def batch() -> int:
            nonlocal batch_number
            batch_number += 1
            made = call = 0
            while made < JOINS * together // TOGETHER:
                call += 1
                visitors = [
                    (f"b{batch_number}c{call}j{j}", f"10.{batch_number}.{call % 250}.{j}" if clients else "")
                    for j in range(together)
                ]
                answered = await store.join_many(ROOM, visitors)
                if answered is None:  # the room's snapshot ran out (a new minute): a poll settles it
                    await store.enter(ROOM, poller, join=False)
                made += len(answered or [])
            return made

        return batch

    async def one_by_one() -> int:
        for i in range(JOINS // TOGETHER):
            await store.enter(ROOM, f"one{i}")
        return JOINS // TOGETHER

    async def polls() -> int:
        for _ in range(POLLS):
            await store.enter(ROOM, poller, join=False)
        return POLLS

    # What a call pays before its own work: scripts made of the first parts
    # of a script alone, then `return 1`, with the room's keys.
    keys = store.keys(ROOM.name)

    def parts_only(parts: Sequence[str]) -> Callable[[], Awaitable[int]]:
        text = "\n".join([*(source(f"{part}.lua") for part in parts), "return 1"])

        async def batch() -> int:
            sha = await store.client.script_load(text)
            for _ in range(POLLS):
                await store.client.evalsha(sha, len(keys), *keys, "", "", "")
            return POLLS

        return batch

    report: dict[str, float] = {"waiting": waiting}
    for name, batch in (
        ("join_together", joins(True)),
        ("join_together_no_client", joins(False)),
        ("join_alone", joins(True, 1)),
        ("join_one_by_one", one_by_one),
        ("poll_in_full", polls),
        ("return_1", parts_only(())),
        ("clock_only", parts_only(("clock",))),
        ("a_polls_parts_only", parts_only(POLL_PARTS)),
        ("a_joins_parts_only", parts_only(SCRIPTS["join"][:-1])),
    ):
        instructions, made = await counter.count(name, batch)
        report[name] = round(instructions / made)
    await store.aclose()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.redis_instructions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--waiting", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each batch's callgrind output in DIR")
    args = parser.parse_args(argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control") and shutil.which("redis-server")):
        parser.error("needs valgrind (callgrind_control) and redis-server on the PATH")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as directory:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        counter = Callgrind(directory, args.keep)
        try:
            report = asyncio.run(measure(counter, args.waiting))
        finally:
            counter.close()
    report["seconds"] = round(time.monotonic() - started, 1)
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
