"""The console's commands against Redis (list, show, set, release, remove,
drain, seed), each call bounded by ``--timeout``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..calls import FAILURES
from ..console import UNKNOWN, clock, count, duration, milliseconds, per_minute, percent
from ..settings import ROOM_SETTINGS
from ..store import Store, StoreError, connect, operator_name, redacted
from .parser import DURATIONS, URL, CommandError, T


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
        # Said with where it looked: a wrong prefix or database number
        # finds nothing too.
        return (
            f"no rooms yet under the prefix {args.prefix!r} at {redacted(args.url)} (a room is there once "
            "its app has started, or from its first visitor; check --prefix and the database number)"
        )
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
    args.url = url
    client = connect(url, args.timeout, setting=URL)
    store = Store(client, args.prefix, args.timeout, actor=operator_name("console"))
    try:
        return await COMMANDS[args.command](Bounded(store, args.timeout), args)
    finally:
        # Closing waits for nothing from the server, but is bounded too.
        with contextlib.suppress(TimeoutError, *FAILURES):
            async with asyncio.timeout(args.timeout):
                await store.aclose()
