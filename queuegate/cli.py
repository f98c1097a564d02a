"""The operator's console: ``queuegate list|show|set|release|remove|drain|seed|simulate|serve-admin``.

It talks to the same Redis as the app (``--redis`` or ``QUEUEGATE_REDIS_URL``)
and goes through the same scripts, so a change applies in every app process at
its next request. Errors are one line on stderr and a non-zero exit status,
with nothing changed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar
from rich.table import Table
from rich.text import Text

from .analytics import KEEP_MINUTES
from .calls import FAILURES
from .console import UNKNOWN, clock, count, duration, milliseconds, per_minute, percent, show
from .settings import ROOM_SETTINGS, ConfigError
from .simulate import Progress, simulate
from .store import Store, StoreError, UnknownRoom, connect, operator_name, redacted

__all__ = ["main"]

T = TypeVar("T")
DURATIONS = ("per", "session", "abandon", "settle")  # ms in Redis, seconds on the command line


class CommandError(Exception):
    """A one-line message for the operator; the exit status rides along."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    """Bad values are one line on stderr, naming the option, and status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _number(text: str, cast: Callable[[str], float]) -> float:
    try:
        value = cast(text)
    except ValueError:
        kind = "whole number" if cast is int else "number"
        raise argparse.ArgumentTypeError(f"must be a {kind}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _ranged(
    cast: Callable[[str], float], low: float, high: float | None = None, *, above: bool = False
) -> Any:
    """An argparse ``type=``: a number from ``low`` (``above``: more than
    ``low``) up to ``high``."""

    def parse(text: str) -> float:
        value = _number(text, cast)
        if (value <= low if above else value < low) or (high is not None and value > high):
            if high is None:
                wanted = f"more than {low:g}" if above else f"{low:g} or more"
            else:
                wanted = f"more than {low:g} and at most {high:g}" if above else f"from {low:g} to {high:g}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL, got {text!r}")
    return text


def _prefix(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", text):
        raise argparse.ArgumentTypeError(f"must be 1-32 letters, digits, '.', '-' or '_', got {text!r}")
    return text


class _Range(argparse.Action):
    """``MIN MAX``, with MIN <= MAX."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        low, high = values
        if low > high:
            parser.error(
                f"argument {self.option_strings[0]}: MIN ({low:g}) must not be more than MAX ({high:g})"
            )
        setattr(namespace, self.dest, (low, high))


SECONDS = _ranged(float, 0, above=True)
COUNT = _ranged(int, 1)
DESCRIPTION = """\
queuegate's console: list, show and change the rooms in the Redis the app
uses, and send virtual visitors to a gated page."""
EPILOG = """\
Redis comes from --redis or QUEUEGATE_REDIS_URL; changes apply in every app
process at its next request. Errors are one line on stderr and a non-zero
exit status, with nothing changed. Add --json to list, show, seed and
simulate for scripts; without it, tables (in colour on a terminal).

examples:
  queuegate list
  queuegate show sale
  queuegate set sale --rate 20 --per 10
  queuegate simulate --url http://127.0.0.1:8000/checkout --visitors 200
"""


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="queuegate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--redis", metavar="URL", help="Redis URL (default: $QUEUEGATE_REDIS_URL)")
    parser.add_argument(
        "--prefix",
        type=_prefix,
        default=os.environ.get("QUEUEGATE_PREFIX", "qg"),
        help="key prefix (default: $QUEUEGATE_PREFIX or qg)",
    )
    parser.add_argument(
        "--timeout",
        type=SECONDS,
        default=2.0,
        metavar="SECONDS",
        help="give up each call to Redis after this long (default: 2)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="every room with its live numbers")
    listing.add_argument("--json", action="store_true", help="as JSON")

    show = commands.add_parser("show", help="one room: numbers, settings, head of the line")
    show.add_argument("room")
    show.add_argument(
        "--visitors",
        type=_ranged(int, 0, 1000),
        default=5,
        metavar="N",
        help="how many waiting and active ids to list (default: 5)",
    )
    show.add_argument("--json", action="store_true", help="as JSON, with the line minute by minute")
    show.add_argument(
        "--minutes",
        type=_ranged(int, 1, KEEP_MINUTES),
        default=60,
        help=f"how many one-minute points of the line to give with --json (1-{KEEP_MINUTES}, default: 60)",
    )

    office = commands.add_parser(
        "serve-admin", help="serve the back office (its sign-in secret from $QUEUEGATE_ADMIN_SECRET)"
    )
    office.add_argument("--host", default="127.0.0.1")
    office.add_argument("--port", type=_ranged(int, 1, 65535), default=8400)

    change = commands.add_parser("set", help="change a room's run-time settings")
    change.add_argument("room")
    change.add_argument("--rate", type=int, help="visitors admitted per interval")
    change.add_argument("--per", type=float, help="interval, seconds")
    change.add_argument("--capacity", type=int, help="most active sessions (0: no limit)")
    change.add_argument("--session", type=float, help="session length, seconds")
    change.add_argument("--sliding", action=argparse.BooleanOptionalAction, help="renew sessions")
    change.add_argument("--abandon", type=float, help="skip waiting visitors silent this long, seconds")
    change.add_argument("--max-step", type=int, dest="max_step", help="most visitors moved per call")
    change.add_argument("--forget", type=float, help="expire the room this long after its last call, seconds")
    change.add_argument("--status", help="open, paused, queue_all, passthrough or closed")
    change.add_argument("--method", help="fifo or random")
    change.add_argument("--opens-at", dest="opens_at", help="scheduled opening, ISO 8601 with a zone")
    change.add_argument(
        "--client-limit", type=int, dest="client_limit", help="new places per client a minute"
    )
    change.add_argument(
        "--challenge", type=int, help="proof of work before a new place: largest number to try (0: none)"
    )
    change.add_argument(
        "--target-ms", type=int, dest="target_ms", help="health target: p95 of responses, ms (0: off)"
    )
    change.add_argument("--max-errors", type=float, dest="max_errors", help="tolerated error share (0.02)")
    change.add_argument("--floor", type=int, help="the controller's lowest rate (or capacity)")
    change.add_argument("--ceiling", type=int, help="the controller's highest rate (or capacity), 0: none")
    change.add_argument("--settle", type=float, help="seconds between two of the controller's changes")
    change.add_argument(
        "--auto", action="store_true", help="give the rate (or capacity) back to the controller after --rate"
    )
    change.add_argument(
        "--reset", action="append", default=[], metavar="SETTING", help="back to the default from code"
    )

    for name, text in (("release", "free a visitor's slot"), ("remove", "take a visitor out of the room")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("room")
        sub.add_argument("visitor")

    drain = commands.add_parser("drain", help="empty the line (active sessions run on)")
    drain.add_argument("room")
    drain.add_argument("--yes", action="store_true", help="confirm: everyone waiting loses their place")

    seed = commands.add_parser("seed", help="reveal the room's draw seed, to publish after the event")
    seed.add_argument("room")
    seed.add_argument("--json", action="store_true", help="as JSON")

    sim = commands.add_parser("simulate", help="virtual visitors against a gated URL (a load test)")
    sim.add_argument(
        "--url", required=True, type=_url, help="a gated page, e.g. http://127.0.0.1:8000/checkout"
    )
    sim.add_argument("--visitors", type=COUNT, default=100, help="how many (default: 100)")
    sim.add_argument("--concurrency", type=COUNT, default=50, help="most visitors at once (default: 50)")
    sim.add_argument(
        "--give-up",
        type=_ranged(float, 0, 1),
        default=0.2,
        metavar="SHARE",
        help="share of visitors who leave early, 0 to 1 (default: 0.2)",
    )
    sim.add_argument(
        "--patience",
        type=_ranged(float, 0),
        nargs=2,
        action=_Range,
        default=(5.0, 60.0),
        metavar=("MIN", "MAX"),
        help="how long those who leave early wait, seconds (default: 5 60)",
    )
    sim.add_argument(
        "--max-seconds", type=SECONDS, default=600.0, help="stop the run after this long (default: 600)"
    )
    sim.add_argument("--seed", type=int, help="for a repeatable run")
    sim.add_argument("--json", action="store_true", help="the summary as JSON, no progress bar")
    return parser


def _readable(stats: dict[str, Any]) -> dict[str, Any]:
    """Durations back in seconds, for people."""
    out = dict(stats)
    for name in DURATIONS:
        out[name] = out[name] / 1000
    eta = out.pop("eta_back_ms")
    out["eta_back"] = None if eta < 0 else eta / 1000
    if isinstance(out.get("opens_at"), int) and out["opens_at"] > 0:
        out["opens_at"] = datetime.fromtimestamp(out["opens_at"] / 1000, UTC).isoformat()
    return out


Output = str | RenderableType  # a str is printed as it is (JSON, one line)


class Bounded:
    """Each call to Redis given up after ``--timeout`` seconds, whatever the
    connection does (connect, handshake, a reply that never comes)."""

    def __init__(self, store: Store, seconds: float) -> None:
        self.store = store
        self.seconds = seconds

    async def __call__(self, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.seconds):
                return await call
        except TimeoutError:
            raise StoreError(f"no answer within {duration(self.seconds)}") from None


async def _list(ask: Bounded, args: argparse.Namespace) -> Output:
    store = ask.store
    names = await ask(store.room_names())
    stats = [await ask(store.stats(name)) for name in names]
    if args.json:
        return json.dumps([{"room": name, **_readable(row)} for name, row in zip(names, stats, strict=True)])
    if not names:
        return "no rooms yet"
    table = _table()
    table.add_column("room", style="bold")
    table.add_column("status")
    table.add_column("waiting", justify="right")
    table.add_column("active", justify="right")
    table.add_column("admitting", justify="right")
    table.add_column("wait at the back", justify="right")
    table.add_column("admitted", justify="right")
    table.add_column("gave up", justify="right")
    for name, row in zip(names, stats, strict=True):
        table.add_row(
            name,
            _status(row["status"]),
            f"{row['waiting']:,}",
            f"{row['active']:,}",
            per_minute(row["per_minute"]),
            milliseconds(row["eta_back_ms"]),
            f"{row['admitted']:,}",
            f"{row['abandoned']:,}",
        )
    # A room whose target no rate meets says so under the table.
    notes = [
        Text(f"{name}: {row['health_reason']}", style="yellow")
        for name, row in zip(names, stats, strict=True)
        if row.get("out_of_reach_ms", -1) >= 0
    ]
    return Group(table, *notes) if notes else table


STATUS_STYLES = {"open": "green", "paused": "yellow", "closed": "red", "queue_all": "yellow"}


def _status(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _table() -> Table:
    # No rules: piped, a header line and a line per row, for grep and cut.
    return Table(box=None, pad_edge=False, header_style="bold underline", padding=(0, 3, 0, 0))


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    return grid


def _settings_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    now = stats["now"]
    per = milliseconds(stats["per"])
    rows = [
        ("rate", "no limit" if stats["rate"] <= 0 else f"{count(stats['rate'], 'visitor')} every {per}"),
        ("capacity", "no limit" if stats["capacity"] <= 0 else count(stats["capacity"], "active session")),
        (
            "session",
            f"{milliseconds(stats['session'])}, "
            + ("renewed by each request" if stats["sliding"] else "fixed"),
        ),
        ("abandon", f"skip waiting visitors silent for {milliseconds(stats['abandon'])}"),
        ("max_step", f"{count(stats['max_step'], 'visitor')} moved per call at most"),
        (
            "method",
            {"fifo": "fifo (first come, first served)", "random": "random (a lottery)"}.get(
                stats["method"], stats["method"]
            ),
        ),
        ("opens_at", clock(stats["opens_at"], now) + (", pre-queue open" if stats["prequeue"] else "")),
        ("challenge", "none" if stats["challenge"] <= 0 else f"proof of work up to {stats['challenge']:,}"),
        (
            "client_limit",
            "no limit"
            if stats["client_limit"] <= 0
            else f"{count(stats['client_limit'], 'new place')} a minute a client",
        ),
    ]
    return rows


def _controller_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    if stats["target_ms"] <= 0:
        return [("target_ms", "none: the rate is set by hand")]
    ceiling = "none" if stats["ceiling"] <= 0 else f"{stats['ceiling']:,}"
    changed = stats["health_changed"] or UNKNOWN
    if stats["health_changed_at"] > 0:
        changed += f", {clock(stats['health_changed_at'], stats['now'])}"
    return [
        ("target_ms", f"p95 of responses within {milliseconds(stats['target_ms'])}"),
        ("max_errors", f"{percent(stats['max_errors'])} of responses"),
        ("floor / ceiling", f"{stats['floor']:,} / {ceiling}"),
        ("settle", f"{milliseconds(stats['settle'])} between changes"),
        ("pinned", "yes: the operator set the rate" if stats["pinned"] else "no: the controller sets it"),
        (
            "p95_ms",
            f"{milliseconds(stats['p95_ms'])} (first byte {milliseconds(stats['first_byte_p95_ms'])})",
        ),
        ("error_rate", f"{percent(stats['error_rate'])} of {count(stats['samples'], 'response')}"),
        ("health_reason", stats["health_reason"] or UNKNOWN),
        ("last change", changed),
    ]


async def _show(ask: Bounded, args: argparse.Namespace) -> Output:
    store = ask.store
    stats = await ask(store.stats(args.room))
    visitors: dict[str, list[tuple[str, int]]] = {"waiting": [], "active": []}
    if args.visitors:
        visitors = await ask(store.visitors(args.room, args.visitors))
    figures = await ask(store.analytics(args.room, minutes=args.minutes))
    if args.json:
        return json.dumps({"room": args.room, **_readable(stats), "visitors": visitors, "analytics": figures})
    now = stats["now"]
    title = Text.assemble((args.room, "bold"), "  ", _status(stats["status"]), f"  (Redis time {clock(now)})")
    line = _grid()
    line.add_row("waiting", count(stats["waiting"], "visitor"))
    line.add_row("active", count(stats["active"], "session"))
    line.add_row("wait at the back", milliseconds(stats["eta_back_ms"]))
    line.add_row("admitting", f"{per_minute(stats['per_minute'])} lately")
    line.add_row("sessions ending", f"{per_minute(stats['ended_per_minute'])} lately")
    if stats["tokens"] >= 0:
        line.add_row("tokens", f"{stats['tokens']:,} of {stats['rate']:,} left this interval")
    totals = _grid()
    for key in ("joined", "admitted", "abandoned", "expired", "released", "left", "drained"):
        totals.add_row(key, count(stats[key], "visitor"))
    settings = _grid()
    for key, value in _settings_rows(stats):
        settings.add_row(key, value)
    controller = _grid()
    for key, value in _controller_rows(stats):
        controller.add_row(key, value)
    waits = [
        f"waits of those {'admitted' if kind == 'admitted' else 'who gave up'}: {values['count']:,} ("
        + ", ".join(f"{q} {milliseconds(values[q + '_ms'])}" for q in ("p50", "p90", "p99", "max"))
        + ")"
        for kind, values in figures["waits"].items()
    ]
    estimate = figures["estimate"]
    waits.append(
        f"estimates within 20 % of the real wait: {percent(estimate['share'])} of "
        + count(estimate["checked"], "estimate")
    )
    parts: list[RenderableType] = [
        title,
        _heading("The line"), _indent(line),
        _heading("Since the room was made"), _indent(totals),
        _heading("Settings"), _indent(settings),
        _heading("Admission controller"), _indent(controller),
        _heading("Waits"), _indent(Text("\n".join(waits))),
    ]  # fmt: skip
    if args.visitors:
        parts += [_heading("Who"), _indent(_who(visitors, now))]
    return Group(*parts)


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _heading(text: str) -> Text:
    return Text("\n" + text, style="bold underline")


def _who(visitors: dict[str, list[tuple[str, int]]], now: int) -> RenderableType:
    table = _table()
    table.add_column("", justify="right")
    table.add_column("waiting (arrival number)")
    table.add_column("active (session ends)")
    rows = max(len(visitors["waiting"]), len(visitors["active"]))
    if not rows:
        return Text("nobody waiting, nobody active")
    for i in range(rows):
        waiting = visitors["waiting"][i] if i < len(visitors["waiting"]) else None
        active = visitors["active"][i] if i < len(visitors["active"]) else None
        table.add_row(
            str(i + 1),
            "" if waiting is None else f"{waiting[0]} (#{waiting[1]:,})",
            "" if active is None else f"{active[0]}, until {clock(active[1], now)}",
        )
    return table


async def _set(ask: Bounded, args: argparse.Namespace) -> Output:
    changes: dict[str, Any] = {name: getattr(args, name) for name in ROOM_SETTINGS}
    changes = {name: value for name, value in changes.items() if value is not None}
    if args.auto:
        changes["pinned"] = None
    for name in args.reset:
        if name not in ROOM_SETTINGS:
            raise CommandError(f"--reset: unknown setting {name!r} (one of {', '.join(ROOM_SETTINGS)})", 2)
        changes[name] = None
    if not changes:
        raise CommandError("set: name at least one setting to change, e.g. --rate 20", 2)
    await ask(ask.store.stats(args.room))  # an unknown room fails here, before anything is written
    await ask(ask.store.configure(args.room, **changes))
    shown = {k: ("auto" if k == "pinned" else "default") if v is None else v for k, v in changes.items()}
    return f"{args.room}: " + ", ".join(f"{k}={v}" for k, v in shown.items())


async def _release(ask: Bounded, args: argparse.Namespace) -> Output:
    done = await ask(ask.store.release(args.room, args.visitor, who=ask.store.actor))
    return f"{args.visitor}: {'released' if done else 'held no place'}"


async def _remove(ask: Bounded, args: argparse.Namespace) -> Output:
    done = await ask(ask.store.leave(args.room, args.visitor, who=ask.store.actor))
    # Either way every process drops its copy of the visitor's admission.
    return f"{args.visitor}: {'removed' if done else 'held no place in Redis; any copy revoked'}"


async def _drain(ask: Bounded, args: argparse.Namespace) -> Output:
    if not args.yes:
        raise CommandError("drain: everyone waiting would lose their place; add --yes to confirm", 2)
    removed = await ask(ask.store.drain(args.room))
    return f"{args.room}: {count(removed, 'visitor')} removed from the line"


async def _seed(ask: Bounded, args: argparse.Namespace) -> Output:
    stats = await ask(ask.store.stats(args.room))
    seed = await ask(ask.store.seed(args.room))
    await ask(ask.store.note(args.room, "reveal seed", {"seed_sha256": stats["seed_sha256"]}))
    if args.json:
        return json.dumps({"room": args.room, "seed": seed, "seed_sha256": stats["seed_sha256"]})
    return f"seed {seed}\nsha256 {stats['seed_sha256']}"


COMMANDS: dict[str, Callable[[Bounded, argparse.Namespace], Awaitable[Output]]] = {
    "list": _list,
    "show": _show,
    "set": _set,
    "release": _release,
    "remove": _remove,
    "drain": _drain,
    "seed": _seed,
}


async def _run(args: argparse.Namespace, url: str) -> Output:
    # Every change is logged in its room's activity log under this name.
    store = Store(connect(url, args.timeout), args.prefix, args.timeout, actor=operator_name("console"))
    try:
        return await COMMANDS[args.command](Bounded(store, args.timeout), args)
    finally:
        # Closing waits for nothing from the server, but is bounded too.
        with contextlib.suppress(TimeoutError, *FAILURES):
            async with asyncio.timeout(args.timeout):
                await store.aclose()


def _simulate(args: argparse.Namespace, stderr: Console | None = None) -> int:
    """Run ``simulate``; a progress bar on ``stderr`` (the process's) while
    it is a terminal and the summary is not JSON."""
    stderr = stderr or Console(stderr=True)
    terminal = not args.json and stderr.is_terminal
    progress = Progress(args.visitors)
    run = simulate(
        args.url,
        args.visitors,
        args.concurrency,
        give_up=args.give_up,
        patience=tuple(args.patience),
        max_seconds=args.max_seconds,
        seed=args.seed,
        progress=progress,
    )
    if terminal:
        asyncio.run(_with_bar(run, progress, stderr))
    else:
        asyncio.run(run)
    summary = progress.summary()
    warning = progress.warning()
    if warning:
        print(f"queuegate: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    else:
        show(_summary(progress, args.max_seconds))
    return 0 if progress.errors == 0 and not warning else 1


async def _with_bar(run: Awaitable[Progress], progress: Progress, console: Console) -> None:
    """The run with a progress bar on stderr, refreshed 4 times a second."""
    columns = (
        TextColumn("visitors"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    with Bar(*columns, console=console, transient=True) as bar:
        task = bar.add_task("simulate", total=progress.visitors, counts="")
        runner = asyncio.ensure_future(run)
        while not runner.done():
            bar.update(task, completed=progress.done, counts=progress.counts())
            await asyncio.wait([runner], timeout=0.25)
        await runner


def _summary(progress: Progress, max_seconds: float) -> RenderableType:
    summary = progress.summary()
    waits = ", ".join(
        f"{name} {duration(summary[key])}"
        for name, key in (("p50", "wait_p50_s"), ("p90", "wait_p90_s"), ("p99", "wait_p99_s"))
    )
    grid = _grid()
    grid.add_row("visitors", f"{progress.visitors:,}")
    grid.add_row("admitted", f"{progress.admitted:,}" + (f" (waits: {waits})" if progress.waits else ""))
    grid.add_row("gave up", f"{progress.gave_up:,} (their patience ran out)")
    grid.add_row(
        "still waiting", f"{progress.still_waiting:,} (when the run's {duration(max_seconds)} were up)"
    )
    grid.add_row("not started", f"{progress.not_started:,}")
    if progress.ungated:
        grid.add_row("not gated", f"{progress.ungated:,} (let through with no queuegate cookie)")
    grid.add_row("errors", f"{progress.errors:,}")
    for reason, times in progress.reasons.most_common():
        grid.add_row("", f"{count(times, 'visitor')}: {reason}")
    if progress.limited:
        grid.add_row("limited", f"{count(progress.limited, 'answer')} 429 (client_limit), each waited out")
    if progress.unavailable:
        grid.add_row("unavailable", f"{count(progress.unavailable, 'answer')} (Redis away), each retried")
    return grid


def _serve_admin(args: argparse.Namespace, url: str) -> int:
    secret = os.environ.get("QUEUEGATE_ADMIN_SECRET", "")
    if len(secret) < 12:
        raise CommandError(
            "serve-admin: set QUEUEGATE_ADMIN_SECRET (12 characters or more) for its sign-in", 2
        )
    try:
        import uvicorn
    except ImportError:
        raise CommandError('serve-admin needs uvicorn: pip install "queuegate[admin]"', 2) from None
    from . import admin

    office = admin.app(Store(connect(url, args.timeout), args.prefix, args.timeout), secret=secret)
    print(f"queuegate back office: http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(office, host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "simulate":
        return _simulate(args)
    url = args.redis or os.environ.get("QUEUEGATE_REDIS_URL")
    try:
        if not url:
            raise CommandError("no Redis: pass --redis redis://host:6379/0 or set QUEUEGATE_REDIS_URL", 2)
        if args.command == "serve-admin":
            return _serve_admin(args, url)
        output = asyncio.run(_run(args, url))
    except CommandError as exc:
        print(f"queuegate: {exc}", file=sys.stderr)
        return exc.status
    except ConfigError as exc:
        print(f"queuegate: {exc}", file=sys.stderr)
        return 2
    except UnknownRoom as exc:
        print(f"queuegate: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"queuegate: cannot reach Redis at {redacted(url or '?')} ({exc})", file=sys.stderr)
        return 1
    try:
        if isinstance(output, str):
            print(output)
        else:
            show(output)
        sys.stdout.flush()
    except BrokenPipeError:
        # Piped into a reader that stopped early (`| head`): not an error of
        # ours; stdout is pointed at nothing so closing it cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
