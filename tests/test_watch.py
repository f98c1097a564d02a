"""``queuegate list --watch`` and ``show ROOM --watch``: the line live, in
a console run as a subprocess, until Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from queuegate import Room, Store
from queuegate.connections import redacted
from queuegate.embedded import EmbeddedServer
from queuegate.store import connect

from .test_cli import SALE, cli, piped

pytestmark = pytest.mark.anyio


def watching(*args: str, url: str, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env.pop("FORCE_COLOR", None)
    env.update(extra, QUEUEGATE_REDIS_URL=url)
    return subprocess.Popen(
        [sys.executable, "-m", "queuegate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_until(process: subprocess.Popen[str], wanted: str, seconds: float = 20.0) -> str:
    """What the console printed, up to the line ``wanted`` (a regex) is found in."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            line = process.stdout.readline()
            assert line, f"the console ended ({process.poll()}): {''.join(seen)}"
            seen.append(line)
            if re.search(wanted, line):
                return "".join(seen)
    raise AssertionError(f"no {wanted!r} within {seconds} s: {''.join(seen)}")


def interrupt(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C: the status and what went to stderr."""
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    return process.returncode, stderr


async def test_show_watch_prints_a_new_view_each_round_when_piped_and_ends_at_ctrl_c(
    redis_url: str, store: Store
) -> None:
    await store.stats(SALE)
    process = watching("show", "sale", "--watch", "0.5", "--visitors", "0", url=redis_url)
    try:
        first = read_until(process, "client_limit")
        assert re.match(r"queuegate show sale: every 500 ms, at .+ UTC \(Ctrl-C stops\)\n\nsale  open", first)
        assert "\x1b[" not in first  # piped: plain text, no clearing
        # The next round shows what changed meanwhile.
        await store.enter(SALE, "ada")
        await store.enter(SALE, "bob")
        await store.enter(SALE, "cy")
        later = read_until(process, r"^ +waiting +1 visitor$")
        assert "queuegate show sale: every 500 ms" in later
    finally:
        status, stderr = interrupt(process)
    assert (status, stderr) == (0, "")


async def test_watch_with_json_prints_a_document_a_line(redis_url: str, store: Store) -> None:
    await store.stats(SALE)
    process = watching("list", "--json", "--watch", "0.5", url=redis_url)
    try:
        lines = [read_until(process, "sale"), read_until(process, "sale")]
    finally:
        status, stderr = interrupt(process)
    assert [json.loads(line)[0]["room"] for line in lines] == ["sale", "sale"]
    assert (status, stderr) == (0, "")


async def test_list_watch_scans_for_rooms_once_not_every_round(redis_url: str, store: Store) -> None:
    """Finding the rooms scans the whole keyspace (a key or two a visitor):
    every round of a watch did it, on the Redis that holds the line. A room
    made meanwhile shows at the next scan; one gone is found gone at once."""
    await store.stats(SALE)

    async def scanned() -> int:
        stats = await store.client.info("commandstats")
        return int(stats.get("cmdstat_scan", {}).get("calls", 0))

    before = await scanned()
    process = watching("list", "--json", "--watch", "0.5", url=redis_url)
    try:
        for _ in range(5):
            read_until(process, "sale")
        during = await scanned() - before
        await store.forget("sale")
        gone = read_until(process, r"^\[\]$")
    finally:
        status, stderr = interrupt(process)
    assert during == 1, during
    assert json.loads(gone) == []
    assert (status, stderr) == (0, "")


async def test_when_redis_goes_away_the_watch_says_so_and_keeps_trying(own_server: EmbeddedServer) -> None:
    room = Room("drop", paths=["/drop*"], rate=1)
    store = Store(connect(own_server.url, 2.0))
    await store.stats(room)
    await store.aclose()
    process = watching("list", "--watch", "0.5", "--timeout", "1", url=own_server.url)
    try:
        read_until(process, "drop")
        own_server.stop()
        gone = read_until(process, "cannot reach Redis")
        line = gone.splitlines()[-1]
        assert line.startswith(f"cannot reach Redis at {own_server.url} (")
        assert "; trying again every 500 ms" in line
        since = line.split(", since ")[1]
        # Still at it a round later, saying since when.
        assert since in read_until(process, "cannot reach Redis")
        assert process.poll() is None
        # Back with the server (empty: a new one on the same port).
        own_server.start()
        read_until(process, "no rooms yet under the prefix 'qg'")
    finally:
        status, stderr = interrupt(process)
    assert (status, stderr) == (0, "")


def test_a_first_view_that_fails_is_the_usual_one_line_error() -> None:
    down = cli("list", "--watch", url="redis://127.0.0.1:1/0")
    assert down.returncode == 1
    assert down.stderr.startswith("queuegate: cannot reach Redis at redis://127.0.0.1:1/0")
    assert len(down.stderr.splitlines()) == 1
    bad = cli("show", "sale", "--watch", "0.1", url="redis://127.0.0.1:1/0")
    assert bad.returncode == 2
    assert "--watch: must be 0.5 or more, got '0.1'" in bad.stderr


async def test_on_a_terminal_the_view_is_redrawn_in_place(redis_url: str, store: Store) -> None:
    await store.stats(SALE)
    # rich takes FORCE_COLOR for a terminal.
    process = watching("list", "--watch", "0.5", url=redis_url, FORCE_COLOR="1")
    try:
        read_until(process, "sale")
        redrawn = read_until(process, "sale")
    finally:
        status, stderr = interrupt(process)
    assert "\x1b[2J" in redrawn  # the screen cleared before each view
    assert (status, stderr) == (0, "")


async def test_a_reader_that_stops_early_ends_the_watch_quietly(redis_url: str, store: Store) -> None:
    await store.stats(SALE)
    done = await piped("list --watch 0.5", "head -8", redis_url)  # up to the second view's header
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.count("queuegate list: every 500 ms") == 2


async def test_a_room_forgotten_under_a_watch_is_said_with_the_server(redis_url: str, store: Store) -> None:
    """``show ROOM --watch`` on a room forgotten meanwhile says so, naming
    the key prefix and the server it looked on, and keeps watching."""
    await store.stats(SALE)
    process = watching("show", "sale", "--watch", "0.5", url=redis_url)
    try:
        read_until(process, "queuegate show sale: every 500 ms")
        await store.forget("sale")
        said = read_until(process, "no room named").splitlines()[-1]
        assert said.startswith(
            "no room named 'sale' under the key prefix 'qg' has been used yet,"
            f" on Redis at {redacted(redis_url)}, since "
        ), said
        assert process.poll() is None
    finally:
        status, stderr = interrupt(process)
    assert (status, stderr) == (0, "")
