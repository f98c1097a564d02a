"""The console, run as a subprocess against the test server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import io
import json
import os
import pty
import random
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis
from rich.console import Console

from queuegate import Health, Room, Store
from queuegate.cli.activity import change_texts
from queuegate.cli.commands import _set
from queuegate.cli.parser import Parser, _parser
from queuegate.cli.session import opened
from queuegate.cli.views import _list, _who
from queuegate.connections import redacted
from queuegate.console import UNKNOWN, duration
from queuegate.embedded import free_port
from queuegate.health import BOUNDS_MS
from queuegate.store import connect

from .conftest import MakeGate, client_for, wait_for_http
from .servers.proxies import DelayingProxy

SALE = Room("sale", paths=["/checkout*"], rate=2, per=60.0)
ADAPTIVE = Room("adaptive", paths=["/a"], rate=5, per=1.0, target=Health(p95_ms=400))
ROOT = Path(__file__).parent.parent
MARGIN = 1.0  # seconds of scheduling slack on a loaded 2-core machine


def cli(*args: str, url: str | None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    if url:
        env["QUEUEGATE_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "queuegate", *args], capture_output=True, text=True, env=env, timeout=30
    )


async def piped(console_args: str, reader: str, url: str) -> subprocess.CompletedProcess[str]:
    """``queuegate CONSOLE_ARGS | READER`` in bash with pipefail, off the event loop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env["QUEUEGATE_REDIS_URL"] = url
    command = f"{sys.executable} -m queuegate {console_args} | {reader}"
    return await asyncio.to_thread(
        subprocess.run,
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


@pytest.fixture
async def busy_room(make_gate: MakeGate, redis_url: str) -> str:
    gate = await make_gate(rooms=[SALE])
    clients = [client_for(gate) for _ in range(5)]
    for client in clients:
        await client.get("/checkout")
        await client.aclose()
    return redis_url


@pytest.mark.anyio
async def test_a_room_looked_for_under_another_prefix_is_said_with_the_prefix(busy_room: str) -> None:
    """``--prefix qgg`` for ``qg`` said only "no room named 'sale' has been
    used yet", of a room in use; the server is named too (another Redis,
    or another database on it, is the other way to miss a room)."""
    wrong = cli("set", "sale", "--status", "paused", "--prefix", "qgg", url=busy_room)
    assert wrong.returncode == 1
    assert wrong.stderr == (
        "queuegate: no room named 'sale' under the key prefix 'qgg' has been used yet,"
        f" on Redis at {redacted(busy_room)}\n"
    )
    assert json.loads(cli("show", "sale", "--json", url=busy_room).stdout)["status"] == "open"


@pytest.mark.anyio
async def test_a_room_name_not_there_is_said_with_the_rooms_that_are(busy_room: str) -> None:
    """`set Sale` for `sale` said only that no room of that name was used:
    the rooms there are named, the closest first."""
    wrong = cli("set", "Sale", "--status", "paused", url=busy_room)
    assert wrong.returncode == 1
    assert wrong.stderr == (
        "queuegate: no room named 'Sale' under the key prefix 'qg' has been used yet"
        f" (did you mean 'sale'? rooms there: sale), on Redis at {redacted(busy_room)}\n"
    )
    # So does a watch's first look, which ends there.
    watched = cli("show", "Sale", "--watch", "1", url=busy_room)
    assert watched.returncode == 1
    assert "(did you mean 'sale'? rooms there: sale)" in watched.stderr


@pytest.mark.anyio
async def test_list_and_show(busy_room: str) -> None:
    listing = cli("list", url=busy_room)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split()[:4] == ["room", "status", "waiting", "active"]
    assert row.split()[:4] == ["sale", "open", "3", "2"]
    data = json.loads(cli("list", "--json", url=busy_room).stdout)
    assert (data[0]["room"], data[0]["waiting"], data[0]["per"]) == ("sale", 3, 60.0)
    shown = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert len(shown["visitors"]["waiting"]) == 3
    # Two went straight in (a wait of 0), three joined this minute.
    assert shown["analytics"]["waits"]["admitted"]["count"] == 2
    assert sum(minute["joined"] for minute in shown["analytics"]["minutes"]) == 3  # a minute may turn
    text = cli("show", "sale", url=busy_room).stdout
    assert re.search(r"^ +rate +2 visitors every 1 min$", text, re.MULTILINE)
    # Straight in is a wait of 0: no percentile is longer than the longest wait.
    assert "waits of those admitted: 2 (p50 0 s, p90 0 s, p99 0 s, max 0 s)" in text
    assert "waits of those who gave up: none yet" in text
    # Newcomers the client limit turned away (none here), beside the totals.
    assert re.search(r"^ +refused a place +0 times \(client limit\)$", text, re.MULTILINE)
    assert shown["limited"] == 0
    # A list cut at --visitors says how many it leaves out (it said nothing).
    cut = cli("show", "sale", "--visitors", "1", url=busy_room).stdout
    assert re.search(r"^ +and 2 more +and 1 more$", cut, re.MULTILINE), cut
    assert "more" not in cli("show", "sale", "--visitors", "3", url=busy_room).stdout.split("Who")[1]


@pytest.mark.anyio
async def test_numbers_read_with_their_units_and_plain_text_when_piped(busy_room: str) -> None:
    text = cli("show", "sale", url=busy_room).stdout
    # No raw values: no epoch milliseconds, flags as numbers, -1 or empty fields.
    assert not re.search(r"\d{13}|: -1\b|sliding|p95_ms +-1|health_reason *$", text, re.MULTILINE), text
    assert re.search(r"^ +session +10 min, fixed$", text, re.MULTILINE)
    assert re.search(r"^ +wait at the back +\d+ (min|s)( \d+ s)?$", text, re.MULTILINE)
    assert re.search(r"^ +admitting +2 a minute lately$", text, re.MULTILINE)
    assert re.search(r"^ +opens_at +—$", text, re.MULTILINE)
    assert re.search(r"^ +client_limit +300 new places a minute a client$", text, re.MULTILINE)
    assert re.search(r"\(Redis time \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)", text)
    # With the date when the session ends tomorrow (a run just before midnight).
    until = r", until (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \(in \d+ (min|s)( \d+ s)?\)$"
    assert re.search(until, text, re.MULTILINE)
    header, row = cli("list", url=busy_room).stdout.splitlines()
    assert re.fullmatch(r"sale +open +3 +2 +2 +\d+ (min|s)( \d+ s)? +2 +0", row), row
    assert " ".join(header.split()) == (
        "room status waiting active admitted a minute wait at the back admitted in all gave up"
    )
    for output in (text, header, row):
        assert "\x1b[" not in output
        assert output == output.rstrip() + ("\n" if output is text else "")
    # On a terminal (rich takes FORCE_COLOR as one), in colour.
    coloured = cli("list", url=busy_room, FORCE_COLOR="1").stdout
    assert "\x1b[" in coloured
    assert json.loads(cli("list", "--json", url=busy_room, FORCE_COLOR="1").stdout)[0]["room"] == "sale"


@pytest.mark.anyio
async def test_list_fits_80_columns_with_every_name_and_figure_whole(busy_room: str) -> None:
    """On a terminal 80 columns wide, three rooms named `ticket-...`
    showed as `ticket-…`, and a wait as `4 min 47` over `s`: the rooms'
    names and figures stay whole, and the headers wrap instead; with
    figures of six digits and more, a room a block, each figure on its
    label's line. Every heading is there either way (a column too wide
    was dropped)."""
    names = ["ticket-jazz-night", "ticket-rock-arena", "ticket-opera-gala"]
    await _rooms_named(busy_room, names)
    heads = ["waiting", "active", "admitted", "minute", "wait", "back", "all", "gave"]  # the figures'

    def seen(columns: int) -> str:
        shown = on_a_terminal(columns, "list", url=busy_room)
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in shown.splitlines()]
        assert all(len(line) <= columns for line in lines), lines
        text = "\n".join(lines)
        assert "…" not in text, text
        for name in [*names, "sale"]:
            assert re.search(rf"^ *{name} ", text, re.M), text
        words = " ".join(text.split())
        assert all(head.split()[0] in words for head in heads), text
        return words

    seen(80)
    client = aioredis.Redis.from_url(busy_room)
    try:  # a long day's counts
        await client.hset("qg:{ticket-rock-arena}:state", mapping={"admitted": 456789, "abandoned": 12345})
    finally:
        await client.aclose()
    for columns in (80, 60, 50):
        words = seen(columns)
        assert "456,789" in words, words
        assert "12,345" in words, words
    # Stacked, a figure stays on its label's line: at 50 columns `gave up`
    # ended one line and its `0` began the next.
    shown = on_a_terminal(50, "list", url=busy_room)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in shown.splitlines()]
    assert not [line for line in lines if re.match(r" *[0-9\u2014]", line)], lines


def on_a_terminal(columns: int, *args: str, url: str) -> str:
    """What the console prints on a terminal ``columns`` wide (a pty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_") and k != "COLUMNS"}
    env["QUEUEGATE_REDIS_URL"] = url
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    try:
        subprocess.run(
            [sys.executable, "-m", "queuegate", *args], stdout=side, env=env, timeout=30, check=True
        )
    finally:
        os.close(side)
    shown = b""
    with contextlib.suppress(OSError):  # EIO: the terminal's other side is closed
        while chunk := os.read(main, 65536):
            shown += chunk
    os.close(main)
    return shown.decode().replace("\r\n", "\n")


async def _rooms_named(url: str, names: list[str]) -> None:
    store = Store(connect(url, 5.0))
    try:
        for name in names:
            await store.enter(Room(name, paths=["/t"], rate=1, per=600.0), "someone")
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_a_change_at_a_terminal_names_the_redis_it_changed(busy_room: str) -> None:
    # (A console pointed at staging taken for production's said only "sale: status=paused".)
    shown = on_a_terminal(100, "set", "sale", "--status", "paused", url=busy_room)
    assert shown == f"sale: status=paused\n(on Redis at {redacted(busy_room)}, key prefix 'qg')\n"
    piped = cli("set", "sale", "--status", "open", url=busy_room)
    assert piped.stdout == "sale: status=open\n"  # what scripts read, as before


def test_help_is_plain_text() -> None:
    for args in ((), ("show",), ("simulate",), ("set",)):
        shown = cli(*args, "--help", url=None)
        assert shown.returncode == 0
        assert shown.stdout.startswith("usage: queuegate")
        assert not re.search(r"``|:class:|:func:|\.\. ", shown.stdout), shown.stdout


def test_the_health_guide_lists_the_controllers_options_as_set_help_says_them() -> None:
    """docs/guides/health.md named none of them, and said ``settle`` was
    "the least time between two probes for more" where ``set --help`` said
    "seconds between two of the controller's changes" (a cut waits for
    none): one text now, health.lua's."""
    guide = (ROOT / "docs/guides/health.md").read_text()
    part = guide.split("\n## Tuning at run time\n", 1)[1].split("\n## ", 1)[0]
    listed = {}
    for item in re.split(r"\n- ", part)[1:]:
        said = " ".join(item.split("\n\n", 1)[0].split())
        listed[said.split("`")[1].split()[0]] = said
    (commands,) = [each for each in _parser()._actions if isinstance(each, argparse._SubParsersAction)]
    helps = {
        each.option_strings[0]: each.help for each in commands.choices["set"]._actions if each.option_strings
    }
    options = ["--target-ms", "--max-errors", "--floor", "--ceiling", "--settle", "--auto"]
    assert sorted(listed) == sorted(options)
    for option in options:
        assert f": {helps[option]}" in listed[option], option
    # With the value as the help's usage shows it.
    shown = " ".join(cli("set", "--help", url=None).stdout.split())
    for said in listed.values():
        assert said.split("`")[1] in shown
    # The guide's settle and Health's say what the help says.
    assert "the least time a change of the rate gets to show" in helps["--settle"]
    assert "the least time a change of the rate gets to show" in " ".join(guide.split())
    assert "the least time a change of the rate gets to show" in " ".join((Health.__doc__ or "").split())


def test_every_option_of_every_command_says_what_it_is() -> None:
    """`serve-admin --help` showed --host HOST and --port PORT and nothing
    else: each option has its help, and its default where it has one."""
    parser = _parser()
    for name, command in [("", parser), *parser.commands.items()]:  # type: ignore[attr-defined]
        for action in command._actions:
            if action.option_strings:
                assert action.help, f"queuegate {name} {action.option_strings}: no help"
    shown = " ".join(cli("serve-admin", "--help", url=None).stdout.split())
    assert "(default: 127.0.0.1, this machine only;" in shown
    assert "port to listen on (default: 8400)" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("simulate", "--url", "http://x", "--patience", "40", "5"), "--patience: MIN (40) must not be more"),
        (("simulate", "--url", "http://x", "--give-up", "1.5"), "--give-up: must be from 0 to 1, got '1.5'"),
        (("simulate", "--url", "http://x", "--visitors", "0"), "--visitors: must be 1 or more, got '0'"),
        (("simulate", "--url", "http://x", "--max-seconds", "-1"), "--max-seconds: must be more than 0"),
        (("simulate", "--url", "localhost:8000/checkout"), "--url: must be an http:// or https:// URL"),
        (("show", "sale", "--minutes", "-3"), "--minutes: must be from 1 to 2880, got '-3'"),
        (("show", "sale", "--minutes", "soon"), "--minutes: must be a whole number, got 'soon'"),
        (("show", "sale", "--visitors", "-1"), "--visitors: must be from 0 to 1000"),
        (("--timeout", "0", "list"), "--timeout: must be more than 0, got '0'"),
        (("--timeout", "nan", "list"), "--timeout: must be a finite number"),
        (("--prefix", "a b", "list"), "--prefix: must be 1-32 letters"),
        (("serve-admin", "--port", "70000"), "--port: must be from 1 to 65535"),
    ],
)
def test_one_clear_error_per_bad_option(args: tuple[str, ...], message: str) -> None:
    result = cli(*args, url="redis://127.0.0.1:1/0")
    assert (result.returncode, result.stdout) == (2, "")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.anyio
async def test_timeout_bounds_every_call_against_a_silent_server() -> None:
    """A server that accepts and never answers: each command gives up after
    --timeout (it took 7.1 s for show and 18.3 s for list with --timeout 1)."""
    # Timed from the command's first connection to its process's end: the
    # interpreter's start and imports before it are no part of the bound
    # (under load `list` took 3.6 s where `--help` took 1.2 s).
    connected: list[float] = []
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.append(time.monotonic())
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    silent = f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"

    def timed(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
        result = cli(*args, url=silent)
        return result, time.monotonic()

    try:
        for args in (("show", "sale"), ("list",), ("set", "sale", "--rate", "3"), ("seed", "sale", "--yes")):
            connected.clear()
            result, ended = await anyio.to_thread.run_sync(timed, "--timeout", "1", *args)
            assert result.returncode == 1
            assert "no answer within 1 s" in result.stderr
            assert connected, args
            assert ended - connected[0] < 1 + MARGIN, (args, ended - connected[0])
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
async def test_set_release_remove_drain_seed(busy_room: str) -> None:
    changed = cli("set", "sale", "--rate", "10", "--status", "paused", url=busy_room)
    assert changed.returncode == 0, changed.stderr
    shown = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert (shown["rate"], shown["status"]) == (10, "paused")
    assert cli("set", "sale", "--reset", "rate", url=busy_room).returncode == 0
    assert json.loads(cli("show", "sale", "--json", url=busy_room).stdout)["rate"] == 2
    first_waiting = shown["visitors"]["waiting"][0][0]
    first_active = shown["visitors"]["active"][0][0]
    assert "removed" in cli("remove", "sale", first_waiting, url=busy_room).stdout
    assert "released" in cli("release", "sale", first_active, url=busy_room).stdout
    # Again, or a mistyped id: an error a script sees, nothing said on stdout.
    again = cli("release", "sale", first_active, url=busy_room)
    assert (again.returncode, again.stdout) == (1, "")
    assert f"release: {first_active}: holds no admission in room 'sale'; one still in line" in again.stderr
    again = cli("remove", "sale", "no-such-visitor", url=busy_room)
    assert (again.returncode, again.stdout) == (1, "")
    assert "remove: no-such-visitor: holds no place in room 'sale'; any copy" in again.stderr
    refused = cli("drain", "sale", url=busy_room)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "--yes" in refused.stderr
    assert "2 visitors removed" in cli("drain", "sale", "--yes", url=busy_room).stdout
    # The seed, as drain's line, only once confirmed: shown early, the draw is predictable.
    refused = cli("seed", "sale", "--json", url=busy_room)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "can predict the room's draws" in refused.stderr
    assert "add --yes to confirm" in refused.stderr
    seed = json.loads(cli("seed", "sale", "--json", "--yes", url=busy_room).stdout)
    assert len(seed["seed"]) == 32
    assert len(seed["seed_sha256"]) == 64


@pytest.mark.anyio
async def test_show_and_list_mark_each_setting_set_at_run_time_with_the_codes_value(
    redis_url: str, store: Store
) -> None:
    # (No gate here: its ticker would tell Redis SALE's values again.)
    await store.stats(SALE)
    assert cli("set", "sale", "--status", "paused", "--session", "600", url=redis_url).returncode == 0
    # The app redeployed with another session and rate: the code's values
    # reach Redis with its first call.
    await store.stats(Room("sale", paths=["/checkout*"], rate=3, per=60.0, session=900.0))
    text = cli("show", "sale", url=redis_url).stdout
    assert re.search(r"^ +status +paused +set at run time; code: open$", text, re.MULTILINE), text
    assert re.search(r"^ +session +10 min, fixed +set at run time; code: 15 min, fixed$", text, re.MULTILINE)
    assert re.search(r"^ +rate +3 visitors every 1 min$", text, re.MULTILINE)  # the code's, unmarked
    assert re.search(r"^ +forget +never \(queuegate forget deletes the room\)$", text, re.MULTILINE)
    shown = json.loads(cli("show", "sale", "--json", url=redis_url).stdout)
    assert shown["run_time"] == {
        "session": {"value": 600.0, "code": 900.0},
        "status": {"value": "paused", "code": "open"},
    }
    assert (shown["controlled"], shown["forget"]) == (None, 0.0)
    listed = cli("list", url=redis_url).stdout.splitlines()
    assert listed[2:] == ["sale: session, status set at run time (queuegate show sale)"]
    assert json.loads(cli("list", "--json", url=redis_url).stdout)[0]["run_time"] == shown["run_time"]
    # Set to what the code says: still set at run time (a later deploy does not change it).
    assert cli("set", "sale", "--session", "900", url=redis_url).returncode == 0
    text = cli("show", "sale", url=redis_url).stdout
    assert re.search(r"^ +session +15 min, fixed +set at run time, the same as the code$", text, re.MULTILINE)


@pytest.mark.anyio
async def test_set_keeps_rate_and_per_as_one_pair_and_resets_all(redis_url: str, store: Store) -> None:
    await store.stats(Room("sale", paths=["/checkout*"], rate=2, per=1.0))
    changed = cli("set", "sale", "--rate", "5", url=redis_url)
    assert changed.stdout == "sale: rate=5, per=1 (per kept with it: rate and per are one pair)\n"
    # Listed as the pair, which only --rate set ("rate, per set at run
    # time" read as if --per had been given too).
    listed = cli("list", url=redis_url).stdout.splitlines()
    assert listed[2:] == ["sale: rate/per (one pair) set at run time (queuegate show sale)"]
    await store.stats(SALE)  # redeployed: 2 a minute in code
    text = cli("show", "sale", url=redis_url).stdout
    assert re.search(
        r"^ +rate +5 visitors every 1 s +set at run time; code: 2 visitors every 1 min$", text, re.M
    )
    reset = cli("set", "sale", "--reset", "per", url=redis_url)
    said = "sale: per back to the code's (60), rate back to the code's (2)"
    assert reset.stdout == said + " (rate reset with it: rate and per are one pair)\n"
    assert json.loads(cli("show", "sale", "--json", url=redis_url).stdout)["run_time"] == {}
    cli("set", "sale", "--per", "2", "--status", "paused", "--max-step", "10", url=redis_url)
    listed = cli("list", url=redis_url).stdout.splitlines()
    assert listed[2:] == ["sale: rate/per (one pair), max_step, status set at run time (queuegate show sale)"]
    everything = cli("set", "sale", "--reset", "all", url=redis_url)
    assert everything.stdout == (
        "sale: every setting back to the code's (set at run time before: rate, per, max_step, status)\n"
    )
    shown = json.loads(cli("show", "sale", "--json", url=redis_url).stdout)
    assert (shown["run_time"], shown["rate"], shown["per"], shown["status"]) == ({}, 2, 60.0, "open")
    # A setting given beside it keeps its new value.
    but = cli("set", "sale", "--reset", "all", "--status", "paused", url=redis_url)
    assert but.stdout == (
        "sale: every other setting back to the code's (set at run time before: none); status=paused\n"
    )
    assert json.loads(cli("show", "sale", "--json", url=redis_url).stdout)["status"] == "paused"
    # A value and a reset of the same setting contradict: refused, nothing
    # written (the reset won in silence: `--rate 3 --reset rate` said
    # rate=default, exit 0).
    for flags in (["--rate", "3", "--reset", "rate"], ["--client-limit", "9", "--reset", "client_limit"]):
        both = cli("set", "sale", *flags, url=redis_url)
        assert (both.returncode, both.stdout) == (2, ""), flags
        assert "contradict: give one" in both.stderr
    assert list(json.loads(cli("show", "sale", "--json", url=redis_url).stdout)["run_time"]) == ["status"]


@pytest.mark.anyio
async def test_reset_all_takes_a_pin_made_just_before_it_with_the_rest(
    redis_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--reset all` read the room (pinned?) and then reset what it had
    read: a pin another operator made between the two was kept and the
    rate it pinned reset, leaving the room pinned at the code's rate, and
    the console said nothing had been set. Here the pin lands, from
    another client, after anything the console does first and just before
    its write: read and reset in one script, it goes with the rest."""
    await store.enter(ADAPTIVE, "a")
    args = _parser().parse_args(["set", "adaptive", "--reset", "all"])
    async with opened(args, redis_url) as ask:
        configure = ask.store.configure

        async def pinned_meanwhile(room: str, **changes: Any) -> dict[str, str]:
            await store.configure("adaptive", rate=50)  # another operator's pin
            return await configure(room, **changes)

        monkeypatch.setattr(ask.store, "configure", pinned_meanwhile)
        said = await _set(ask, args)
    stats = await store.stats("adaptive")
    assert (stats["pinned"], stats["rate"], stats["run_time"]) == (0, 5, [])
    assert said == "adaptive: every setting back to the code's (set at run time before: rate, per)"
    log = await store.activity("adaptive")
    # The log names what the reset changed: the pin and the rate it set.
    assert log[0]["details"] == {"rate": None, "per": None, "pinned": None}


@pytest.mark.anyio
async def test_reset_all_and_a_pin_at_the_same_time_come_one_wholly_after_the_other(
    redis_url: str, store: Store
) -> None:
    """The console's `--reset all` and another operator's pin, on two
    clients of the real server at once, round after round, each started
    after a random moment: the room ends reset (the pin came first, and
    the console names the rate it reset) or pinned at the pin's rate (it
    came after, and the console found nothing set), never pinned at the
    code's rate or said wrong."""
    await store.enter(ADAPTIVE, "a")
    args = _parser().parse_args(["set", "adaptive", "--reset", "all"])
    shuffle = random.Random(7)
    outcomes = set()
    async with opened(args, redis_url) as ask:

        async def after(seconds: float, call: Any) -> Any:
            await asyncio.sleep(seconds)
            return await call

        for _ in range(120):
            if (await store.stats("adaptive"))["pinned"]:
                await store.configure("adaptive", rate=None, pinned=None)
            said, _ = await asyncio.gather(
                after(shuffle.uniform(0, 0.003), _set(ask, args)),
                after(shuffle.uniform(0, 0.003), store.configure("adaptive", rate=50)),
            )
            stats = await store.stats("adaptive")
            # (A pin that lands between the console's look before its change
            # and its look after is said as a risk of the change it saw.)
            said, *warned = said.split("\nwarning: ")
            assert warned in ([], ["rate 50 per 1 s lets in 10 times as many a second as before (5 per 1 s)"])
            outcome = (stats["pinned"], stats["rate"], said)
            assert outcome in {
                (0, 5, "adaptive: every setting back to the code's (set at run time before: rate, per)"),
                (1, 50, "adaptive: every setting back to the code's (set at run time before: none)"),
            }
            outcomes.add(outcome[0])
    assert outcomes == {0, 1}  # each came first at times


@pytest.mark.anyio
async def test_an_abandon_under_3_s_is_refused_and_nothing_changed(redis_url: str, store: Store) -> None:
    """A waiting page asks every second at the quickest, so an abandon under
    3 s skips visitors who are still there: it was taken without a word
    (only the docs said to keep it to 3 s or more)."""
    await store.stats(SALE)
    refused = cli("set", "sale", "--abandon", "2", "--status", "paused", url=redis_url)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "abandon must be 0 (never skip) or at least 3 s" in refused.stderr
    stats = await store.stats("sale")
    assert (stats["abandon"], stats["status"], stats["run_time"]) == (300_000, "open", [])
    for fine in ("3", "0"):
        assert cli("set", "sale", "--abandon", fine, url=redis_url).returncode == 0
    assert (await store.stats("sale"))["abandon"] == 0


@pytest.mark.anyio
async def test_forget_deletes_a_room_left_behind_once_confirmed_and_never_one_in_use(
    busy_room: str, store: Store
) -> None:
    await store.stats(Room("renamed", paths=["/old*"], rate=1))
    unconfirmed = cli("forget", "renamed", url=busy_room)
    assert (unconfirmed.returncode, unconfirmed.stdout) == (2, "")
    assert "would be deleted; add --yes to confirm" in unconfirmed.stderr
    # A setting an operator made at run time, which the code will not give
    # back, is named before anything goes.
    await store.configure("renamed", status="paused", session=90.0)
    unconfirmed = cli("forget", "renamed", url=busy_room)
    lost = "set at run time, and lost: session 90, status paused; add --yes"
    assert f"would be deleted; {lost}" in unconfirmed.stderr
    # A room in use, refused even with --yes, is said so before (a runbook's
    # trial: asked only for --yes, then refused).
    unconfirmed = cli("forget", "sale", url=busy_room)
    assert unconfirmed.returncode == 2
    left = ", ".join(visitor for visitor, _ in (await store.visitors("sale"))["active"])
    assert unconfirmed.stderr.endswith(
        "; but it is in use (3 visitors waiting, 2 sessions), and is forgotten only once its line is "
        "drained (queuegate drain sale --yes) and its sessions ended, or end them now: queuegate release "
        f"sale ID (the sessions left: {left}); add --yes to confirm\n"
    )
    in_use = cli("forget", "sale", "--yes", url=busy_room)
    assert (in_use.returncode, in_use.stdout) == (1, "")
    assert re.fullmatch(
        r"queuegate: forget: room 'sale' is in use \(3 visitors waiting, 2 sessions, the last ending "
        r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \(in \d+ min( \d+ s)?\)\), nothing deleted: "
        r"its app may still send visitors there\. Drain its line \(queuegate drain sale --yes\) and let "
        r"the sessions end first, or end them now: queuegate release sale ID "
        rf"\(the sessions left: {re.escape(left)}\)\n",
        in_use.stderr,
    ), in_use.stderr
    done = cli("forget", "renamed", "--yes", url=busy_room)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("renamed: forgotten. An app that still has this room in its code makes it")
    assert [row["room"] for row in json.loads(cli("list", "--json", url=busy_room).stdout)] == ["sale"]
    assert "no room named 'renamed'" in cli("forget", "renamed", "--yes", url=busy_room).stderr
    # Its own log went with it: the forget is logged aside, with what it lost.
    aside = [json.loads(item) for item in await store.client.lrange("qg:admin:activity", 0, -1)]
    assert [(e["action"], e["details"]) for e in aside] == [
        ("forget", {"room": "renamed", "set at run time": {"session": 90.0, "status": "paused"}})
    ]
    assert aside[0]["who"].startswith("console (")


@pytest.mark.anyio
async def test_a_forget_refused_for_a_few_sessions_names_them_to_release(
    make_gate: MakeGate, redis_url: str, store: Store
) -> None:
    """A room left with one session (a tester's tab) was refused with only
    "drain its line" to do (a newcomer's trial): a few sessions are named,
    with the command that ends each now; more than a few are not."""
    old = Room("old", paths=["/old*"], rate=10, per=60.0)
    gate = await make_gate(rooms=[old])
    async with client_for(gate) as client:
        assert (await client.get("/old")).status_code == 200
    (visitor, _), *_ = (await store.visitors("old"))["active"]
    refused = cli("forget", "old", "--yes", url=redis_url)
    assert refused.returncode == 1
    assert refused.stderr.endswith(
        f"or end it now: queuegate release old ID (the session left: {visitor})\n"
    ), refused.stderr
    assert f"(the session left: {visitor}); add --yes" in cli("forget", "old", url=redis_url).stderr
    assert cli("release", "old", visitor, url=redis_url).returncode == 0
    done = cli("forget", "old", "--yes", url=redis_url)
    assert done.returncode == 0, done.stderr
    # Six: waited out, as before.
    for _ in range(6):
        async with client_for(gate) as client:
            assert (await client.get("/old")).status_code == 200
    refused = cli("forget", "old", "--yes", url=redis_url)
    assert "6 sessions" in refused.stderr
    assert "release" not in refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # --p was --port until every command took --prefix too.
        (
            ("serve-admin", "--p", "9000"),
            "queuegate serve-admin: unknown option --p: options are not abbreviated "
            "(did you mean --port or --prefix?) (see queuegate serve-admin --help)",
        ),
        (
            ("--red", "redis://x", "list"),
            "queuegate: unknown option --red: options are not abbreviated (did you mean --redis?)",
        ),
        (
            ("list", "--red=redis://x"),
            "queuegate list: unknown option --red: options are not abbreviated (did you mean --redis?)",
        ),
        (
            ("set", "sale", "--ra", "5"),
            "queuegate set: unknown option --ra: options are not abbreviated (did you mean --rate?)",
        ),
        (("show", "sale", "--colour"), "queuegate show: unknown option --colour (see queuegate show --help)"),
        # A misspelt option is named with those spelt most like it.
        (
            ("set", "sale", "--satus", "paused"),
            "queuegate set: unknown option --satus (did you mean --status?) (see queuegate set --help)",
        ),
        (
            ("set", "sale", "--max_step", "3"),
            "queuegate set: unknown option --max_step (did you mean --max-step?)",
        ),
        (("--rdis", "redis://x", "list"), "queuegate: unknown option --rdis (did you mean --redis?)"),
    ],
)
def test_only_whole_option_names_with_a_clear_error(args: tuple[str, ...], message: str) -> None:
    """An abbreviation's meaning changes as options are added, silently:
    each is refused, naming the options it may have meant, before Redis is
    asked anything (nothing answers at the URL below: that would be status 1)."""
    result = cli(*args, url="redis://127.0.0.1:1/0")
    assert (result.returncode, result.stdout) == (2, "")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_option_of_a_group_is_known(capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown means unknown to argparse: an option added through a group
    (help's sections) is taken, and abbreviated it is still refused."""
    parser = Parser(prog="queuegate")
    parser.add_argument_group("where").add_argument("--redis")
    assert parser.parse_args(["--redis", "redis://x"]).redis == "redis://x"
    with pytest.raises(SystemExit):
        parser.parse_args(["--red", "redis://x"])
    said = capsys.readouterr().err
    assert "unknown option --red: options are not abbreviated (did you mean --redis?)" in said


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("show", "nope"), 1, "no room named 'nope'"),
        (("set", "nope", "--rate", "3"), 1, "no room named 'nope'"),
        (
            ("remove", "nope", "v1"),
            1,
            "no room named 'nope' under the key prefix 'qg' has been used yet (or its data was lost)",
        ),
        (("set", "sale", "--rate", "-3"), 2, "rate must be a whole number >= 0"),
        (("set", "sale", "--status", "ajar"), 2, "status must be one of"),
        (("set", "sale", "--opens-at", "tomorrow"), 2, "opens_at must be an ISO 8601 time"),
        (("set", "sale"), 2, "name at least one setting"),
        (("set", "sale", "--reset", "speed"), 2, "unknown setting 'speed'"),
    ],
)
async def test_clear_errors_change_nothing(
    busy_room: str, args: tuple[str, ...], status: int, message: str
) -> None:
    result = cli(*args, url=busy_room)
    assert result.returncode == status
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    after = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert (after["rate"], after["status"]) == (2, "open")


def test_unreachable_redis_and_missing_url() -> None:
    down = cli("list", url="redis://127.0.0.1:1/0")
    assert down.returncode == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in down.stderr
    secret = cli("list", url="redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in secret.stderr
    assert "redis://:***@127.0.0.1:1/0" in secret.stderr
    missing = cli("list", url=None)
    assert missing.returncode == 2
    assert "QUEUEGATE_REDIS_URL" in missing.stderr


@pytest.mark.anyio
async def test_where_to_look_may_follow_the_command_and_an_empty_answer_says_where_it_looked(
    busy_room: str,
) -> None:
    after = cli("list", "--json", "--redis", busy_room, url=None)
    assert after.returncode == 0, after.stderr
    assert [row["room"] for row in json.loads(after.stdout)] == ["sale"]
    # Given before the command, and not overridden by a command's defaults.
    before = cli("--prefix", "elsewhere", "list", "--redis", busy_room, url=None)
    assert before.returncode == 0, before.stderr
    assert before.stdout.startswith(f"no rooms yet under the prefix 'elsewhere' at {busy_room} ")
    assert "check --prefix and the database number" in before.stdout
    wrong = cli("list", "--redis", "http://x", url=None)
    assert wrong.returncode == 2
    assert "the Redis URL (--redis, QUEUEGATE_REDIS_URL) must start with redis://" in wrong.stderr


@pytest.mark.anyio
async def test_serve_admin_serves_the_back_office_behind_its_secret(busy_room: str) -> None:
    await anyio.to_thread.run_sync(serve_admin_and_sign_in, busy_room)


def serve_admin_and_sign_in(redis_url: str) -> None:
    assert "set QUEUEGATE_ADMIN_SECRET" in cli("serve-admin", url=redis_url).stderr  # no secret: refused
    short = cli("serve-admin", url=redis_url, QUEUEGATE_ADMIN_SECRET="short")
    assert "QUEUEGATE_ADMIN_SECRET has 5 characters; its sign-in needs 12 or more" in short.stderr
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env.update(QUEUEGATE_REDIS_URL=redis_url, QUEUEGATE_ADMIN_SECRET="serve-admin-secret")
    server = subprocess.Popen(
        [sys.executable, "-m", "queuegate", "serve-admin", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/login")
        with httpx.Client(base_url=base) as operator:
            assert operator.get("/api/rooms").status_code == 401
            assert operator.post("/login", data={"secret": "serve-admin-secret"}).status_code == 303
            (room,) = operator.get("/api/rooms").json()["rooms"]
            assert (room["room"], room["waiting"]) == ("sale", 3)
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.anyio
async def test_a_reader_that_stops_early_is_no_error(busy_room: str) -> None:
    """`queuegate show sale --json --visitors 1000 | head -c 10`: the reader
    closes the pipe long before the output (over a pipe's 64 KiB) is
    written; the console ends quietly with status 0."""
    import redis.asyncio as aioredis

    async with aioredis.Redis.from_url(busy_room) as plain:
        await plain.zadd("qg:{sale}:waiting", {f"x{i:05}" * 20: 1000 + i for i in range(1000)})
    done = await piped("show sale --json --visitors 1000", "head -c 10", busy_room)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) == 10
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_list_leaves_out_a_room_gone_since_it_was_listed(busy_room: str) -> None:
    """``list --watch`` reads the rooms it listed a while ago: one gone
    since (or not used yet) was an UnknownRoom for the whole table."""
    args = _parser().parse_args(["list", "--json"])
    async with opened(args, busy_room) as ask:
        listed = json.loads(str(await _list(ask, args, ["sale", "gone"])))
    assert [row["room"] for row in listed] == ["sale"]


@pytest.mark.anyio
async def test_show_says_no_estimate_was_checked_yet_in_a_new_room(redis_url: str, store: Store) -> None:
    """Nobody admitted from the line yet: `show` said the estimates' accuracy
    was "— of 0 estimates" (an operator's review), where the back office
    says it in a sentence."""
    await store.stats(ADAPTIVE)
    shown = cli("show", "adaptive", url=redis_url).stdout
    assert "estimates within 20 % of the real wait: none checked yet" in shown, shown
    assert "of 0 estimates" not in shown


@pytest.mark.anyio
async def test_show_says_who_set_each_half_of_the_rate(redis_url: str, store: Store) -> None:
    """A rate pinned with its interval, then given back to the controller
    (`--auto`): the controller holds the rate, the interval is still the
    operator's. `show` said the whole line was "set at run time", as if
    the rate were still pinned."""
    await store.stats(ADAPTIVE)
    # Before the controller first moves it, its rate is the code's (`show`
    # said the code's value was not known: a runbook's trial).
    fresh = cli("show", "adaptive", url=redis_url).stdout
    assert re.search(
        r"^ +rate +5 visitors every 1 s +set by the admission controller, the same as the code$", fresh, re.M
    ), fresh
    said = cli("set", "adaptive", "--rate", "3", "--per", "2", url=redis_url).stdout
    assert said == (
        "adaptive: rate=3, per=2, pinned: the controller no longer moves it (`--auto` gives it back)\n"
    )
    # Pinned already, or its controller switched off in the same change: no news.
    again = cli("set", "adaptive", "--rate", "4", "--per", "2", url=redis_url).stdout
    assert again == "adaptive: rate=4, per=2\n"
    pinned = cli("show", "adaptive", url=redis_url).stdout
    assert re.search(r"^ +rate +4 visitors every 2 s +set at run time; code: ", pinned, re.M), pinned
    # A room with a target lets its rate in evenly: 2 each second, not 4 every 2 s.
    evenly = r"^ +tokens +\d left this 1 s step, then 2 a step \(the rate let in evenly"
    assert re.search(evenly, pinned, re.M), pinned
    assert cli("set", "adaptive", "--auto", url=redis_url).returncode == 0
    auto = cli("show", "adaptive", url=redis_url).stdout
    assert re.search(
        r"^ +rate +\d+ visitors? every 2 s +rate set by the admission controller, per at run time; code: ",
        auto,
        re.M,
    ), auto
    # The controller switched off: the rate it left is not said as an operator's.
    assert cli("set", "adaptive", "--target-ms", "0", url=redis_url).returncode == 0
    off = cli("show", "adaptive", url=redis_url).stdout
    assert re.search(
        r"^ +rate +\d+ visitors? every 2 s +left by the admission controller, which is off; code: ", off, re.M
    ), off


@pytest.mark.anyio
async def test_a_change_that_may_flood_or_starve_the_room_is_said_and_made(busy_room: str) -> None:
    """A launch-day typo (`--rate 100 --per 1` for 100 a minute), a session
    too short to finish a visit, a capacity under the sessions inside: the
    console took each without a word (an operator's trial). Each is made,
    and said beside what was applied; a plain change says nothing more."""
    calm = cli("set", "sale", "--rate", "3", url=busy_room)
    assert calm.returncode == 0
    assert calm.stdout == "sale: rate=3, per=60 (per kept with it: rate and per are one pair)\n"
    flood = cli("set", "sale", "--rate", "100", "--per", "1", url=busy_room)
    assert flood.returncode == 0
    assert flood.stdout.splitlines()[1:] == [
        "warning: rate 100 per 1 s lets in 2,000 times as many a second as before (3 per 60 s); "
        "the 3 visitors waiting can all be in at the next refill"
    ]
    assert json.loads(cli("show", "sale", "--json", url=busy_room).stdout)["rate"] == 100  # made all the same
    short = cli("set", "sale", "--session", "5", url=busy_room)
    assert short.stdout.splitlines()[1:] == [
        "warning: session 5 s: each visitor admitted from now on must queue again 5 s after coming in"
    ]
    full = cli("set", "sale", "--capacity", "1", url=busy_room)
    assert full.stdout.splitlines()[1:] == [
        "warning: capacity 1 with 5 sessions active: nobody new is let in until 5 sessions end"
    ]
    assert cli("set", "sale", "--capacity", "1", url=busy_room).stdout.count("warning") == 0  # as it was


@pytest.mark.anyio
async def test_a_change_made_and_not_read_after_says_so_and_is_no_failure(
    server_url: str, redis_url: str, store: Store
) -> None:
    """The look after a change, for what it risks, can fail once the change
    is made: it failed the command (status 1, "nothing changed" by the
    docs) and an operator might make the change again. Redis goes silent
    right after the change here, behind a proxy."""
    await store.enter(SALE, "a")
    proxy = DelayingProxy(int(server_url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    args = _parser().parse_args(["set", "sale", "--rate", "3", "--timeout", "0.5"])
    try:
        async with opened(args, f"redis://127.0.0.1:{proxy.port}/0") as ask:
            configure = ask.store.configure

            async def then_silent(*given: Any, **changes: Any) -> dict[str, str]:
                written = await configure(*given, **changes)
                proxy.flowing.clear()  # a black hole from now on
                return written

            ask.store.configure = then_silent  # type: ignore[method-assign]
            said = await _set(ask, args)
    finally:
        await proxy.close()
    assert said == (
        "sale: rate=3, per=60 (per kept with it: rate and per are one pair)\n"
        "warning: the room could not be read after the change to say what it risks: check it with show"
    )
    assert (await store.stats("sale"))["rate"] == 3


@pytest.mark.anyio
async def test_show_says_how_old_the_controllers_figures_are_once_no_response_comes(
    redis_url: str, store: Store
) -> None:
    """The controller's p95 is its last look's, and it looks only as
    responses are reported: after a lull, `show` printed a p95 of minutes
    before as the app's (a newcomer's trial, the app fast again by then).
    Once no response has come for a while, it says when it was read."""
    await store.enter(ADAPTIVE, "a")
    slow = [0] * (len(BOUNDS_MS) + 1)
    slow[-2] = 20
    seconds, micros = await store.client.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    await store.report(ADAPTIVE, 20, 0, slow, slow, now=now - 90_000)  # read 90 s ago
    old = cli("show", "adaptive", url=redis_url).stdout
    said = r"^ +p95_ms +[\d.,]+ m?s \(first byte [^)]*\), read (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC"
    said += r" \(1 min [34]\d s ago\)"
    said += ": no response measured since$"
    assert re.search(said, old, re.MULTILINE), old
    seconds, micros = await store.client.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    await store.report(ADAPTIVE, 20, 0, slow, slow, now=now)  # read now
    fresh = cli("show", "adaptive", url=redis_url).stdout
    assert re.search(r"^ +p95_ms +[\d.,]+ m?s \(first byte [^)]*\)$", fresh, re.MULTILINE), fresh


@pytest.mark.anyio
async def test_activity_says_who_changed_what_and_when(busy_room: str, store: Store) -> None:
    """Who paused the room was in the back office only (a newcomer's
    trial: several operators on a launch day). `queuegate activity` reads
    the rooms' logs, newest first, as the back office shows them; a room
    it does not know is said with the rooms there."""
    assert cli("set", "sale", "--status", "paused", url=busy_room, USER="ada").returncode == 0
    await store.configure("sale", rate=None, per=None, who="deploy script")
    await asyncio.sleep(0.2)  # (the aside log is stamped with this process's reading of Redis's clock)
    await store.note_aside("bob", "virtual visitors", {"visitors": 10})
    text = cli("activity", url=busy_room).stdout.splitlines()
    # (On a loaded machine the entries are a second old or more: "1.3 s ago".)
    clock = r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \((now|\d+(\.\d)? s ago)\)"
    reset = r" · deploy script · sale · settings: reset to the code's values: (rate, per|per, rate)"
    assert re.fullmatch(clock + reset, text[1]), text
    assert re.fullmatch(clock + r" · bob · virtual visitors: visitors 10", text[0]), text
    paused = r" · console \(ada@[^)]+\) · sale · settings: status \"paused\""
    assert re.fullmatch(clock + paused, text[2]), text
    one = cli("activity", "sale", "--count", "1", "--json", url=busy_room)
    (entry,) = json.loads(one.stdout)
    assert (entry["room"], entry["who"]) == ("sale", "deploy script")
    wrong = cli("activity", "Sale", url=busy_room)
    assert wrong.returncode == 1
    assert "(did you mean 'sale'? rooms there: sale)" in wrong.stderr


def test_a_change_of_seconds_reads_as_the_back_office_says_it() -> None:
    """`queuegate activity` said "per 10.0, abandon 90.0" where the back
    office's list said "per 10, abandon 90" for the same entry."""
    assert change_texts({"per": 10.0, "abandon": 90.5, "rate": 3, "status": "paused"}) == [
        "per 10",
        "abandon 90.5",
        "rate 3",
        'status "paused"',
    ]


@pytest.mark.anyio
async def test_who_is_in_the_room_fits_a_narrow_terminal_with_each_time_whole(busy_room: str) -> None:
    """On 80 columns `show`'s visitors wrapped a session's end mid-duration,
    "(in 9 min" over "1 s)", and its waits "max 1 min" over "3 s": narrower
    than a visitor's line, the end goes under its visitor, whole, and the
    waits' figures under their kind; wide enough, on the same line, as
    piped."""
    until = r"until (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \(in \d+ (min|s)( \d+ s)?\)"
    narrow = on_a_terminal(64, "show", "sale", url=busy_room)
    who = re.sub(r"\x1b\[[0-9;]*m", "", narrow).split("Who\n", 1)[1].splitlines()
    assert all(len(line) <= 64 for line in who), who
    ends = [line.strip() for line in who if "until" in line]
    assert len(ends) == 2, who
    assert all(re.fullmatch(until, end) for end in ends), who
    # The waits too: each kind's figures on a line of their own, whole.
    waits = re.sub(r"\x1b\[[0-9;]*m", "", narrow).split("Waits\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert all(len(line) <= 64 for line in waits), waits
    assert [line.rstrip() for line in waits[:2]] == [
        "  waits of those admitted: 2",
        "    p50 0 s, p90 0 s, p99 0 s, max 0 s",
    ], waits
    wide = re.sub(r"\x1b\[[0-9;]*m", "", on_a_terminal(120, "show", "sale", url=busy_room))
    assert len(re.findall(r"^ +1 +\S+ \(#\d+\) +\S+, " + until + " *$", wide, re.MULTILINE)) == 1, wide
    assert "waits of those who gave up: none yet" in wide


def test_every_argument_of_every_command_says_what_it_is() -> None:
    """`show --help` listed "room" under its positional arguments with
    nothing beside it; so did set, release, remove, drain, forget, seed."""
    parser = _parser()
    for name, command in parser.commands.items():  # type: ignore[attr-defined]
        for action in command._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"queuegate {name} {action.dest}: no help"
    assert (
        "room               the room's name, as queuegate list shows it"
        in cli("show", "--help", url=None).stdout
    )


def test_a_duration_reads_as_people_say_it() -> None:
    """A room with nobody waiting had a wait at the back of "0 ms", as if
    measured to the millisecond: none is "0 s"."""
    said = [duration(s) for s in (0, 0.25, 2.5, 42, 142, 3900, 183_600, None, -1)]
    assert said == ["0 s", "250 ms", "2.5 s", "42 s", "2 min 22 s", "1 h 5 min", "2 d 3 h", UNKNOWN, UNKNOWN]
    # Halves up, as the back office's page rounds (round() took them to even).
    assert [duration(s) for s in (142.5, 30.5, 9.95, 0.9996)] == ["2 min 23 s", "31 s", "10 s", "1 s"]


def test_who_is_in_the_room_wraps_where_even_a_split_line_does_not_fit() -> None:
    """Long ids, arrival numbers of seven digits and a session ending
    another day, on 56 columns: where even the end under its visitor does
    not fit, the table wraps, as before; unwrapped, rich dropped the row
    numbers and cut the ids and the ends with "…"."""
    now = 1_764_000_000_000
    ids = ["bO4FN7jcsSAKE1Sx", "Zq9LmN2pRt5VwXy3"]
    visitors = {"waiting": [(ids[0], 1_234_567)], "active": [(ids[1], now + 2 * 86_400_000)]}
    console = Console(width=56, file=io.StringIO(), color_system=None)
    with console.capture() as captured:
        console.print(_who(visitors, now, {"waiting": 1, "active": 1}))
    text = captured.get()
    assert "\u2026" not in text, text
    assert all(len(line) <= 56 for line in text.splitlines()), text
    flat = re.sub(r"\s+", "", text)
    assert all(i in flat for i in ids), text
    assert "(#1,234,567)" in flat, text
    assert any(line.lstrip().startswith("1 ") for line in text.splitlines()), text


@pytest.mark.anyio
async def test_show_says_the_tokens_left_are_the_intervals_and_the_new_rate_the_next(
    redis_url: str, store: Store
) -> None:
    """After `set --rate 30` in an interval of 2 with one spent, show said
    "1 of 30 left this interval": the 1 is the old rate's, the 30 the next
    interval's (a newcomer's trial)."""
    room = Room("sale", paths=["/checkout*"], rate=2, per=600.0)
    await store.enter(room, "someone")
    assert cli("set", "sale", "--rate", "30", url=redis_url).returncode == 0
    text = cli("show", "sale", url=redis_url).stdout
    assert re.search(r"^ +tokens +1 left this interval, then 30 an interval$", text, re.M), text
