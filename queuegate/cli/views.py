"""The console's views of the rooms: ``list`` (every room, a row each)
and ``show`` (one room: the line, its totals, settings and controller, the
waits, who is first), as tables or as JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..console import UNKNOWN, clock, count, milliseconds, per_minute, percent
from ..readings import each_room
from ..stats import health_age_ms, in_people_units, readable, run_time
from ..store import redacted
from .session import Bounded, Output


def _readable(stats: dict[str, Any]) -> dict[str, Any]:
    """Durations back in seconds, for people; the settings set at run time
    with the code's values."""
    out = in_people_units(stats)
    eta = out.pop("eta_back_ms")
    out["eta_back"] = None if eta < 0 else eta / 1000
    out["run_time"] = run_time(stats)
    out["controlled"] = stats["controlled"] or None
    del out["code"]
    return out


async def _list(ask: Bounded, args: argparse.Namespace, names: list[str] | None = None) -> Output:
    """The rooms' table; ``names``: the rooms, when the caller knows them
    (``--watch``: finding them scans the whole keyspace)."""
    store = ask.store
    if names is None:
        names = await ask(store.room_names())
    # A room gone since it was listed (or named before its first use) is left out.
    read = await each_room(names, lambda name: ask(store.stats(name)))
    names, stats = list(read), list(read.values())
    if args.json:
        return json.dumps([{"room": name, **_readable(row)} for name, row in zip(names, stats, strict=True)])
    if not names:
        # Said with where it looked: a wrong prefix or database number
        # finds nothing too.
        return (
            f"no rooms yet under the prefix {args.prefix!r} at {redacted(args.url)} (a room is there once "
            "its app has started, or from its first visitor; check --prefix and the database number)"
        )
    rows = [
        (
            name,
            row["status"],
            f"{row['waiting']:,}",
            f"{row['active']:,}",
            per_minute(row["per_minute"]).removesuffix(" a minute"),
            milliseconds(row["eta_back_ms"]),
            f"{row['admitted']:,}",
            f"{row['abandoned']:,}",
        )
        for name, row in zip(names, stats, strict=True)
    ]
    heads = (
        "room",
        "status",
        "waiting",
        "active",
        "admitted a minute",
        "wait at the back",
        "admitted in all",
        "gave up",
    )

    # Tight, a column is as wide as its widest figure or heading word.
    widths = [
        min(32, max(max(len(row[index]) for row in rows), *map(len, head.split())))
        for index, head in enumerate(heads)
    ]

    def table(tight: bool) -> Table:
        # Tight, each column as wide as its figures, the headers wrapping:
        # on 80 columns a room's name and each figure stay whole (it showed
        # `ticket-…` for three rooms, a wait as `4 min 47` over `s`).
        made = _table()
        if tight:
            made.padding = (0, 2, 0, 0)
        for index, (head, width) in enumerate(zip(heads, widths, strict=True)):
            made.add_column(
                head,
                style="bold" if index == 0 else "",
                justify="left" if index < 2 else "right",
                no_wrap=not tight,
                min_width=width if tight else None,
                max_width=width if tight and index else None,
            )
        for row in rows:
            made.add_row(row[0], _status(row[1]), *row[2:])
        return made

    def stacked() -> Group:
        # Narrower still (or figures of six digits and more): a room a block.
        blocks: list[RenderableType] = []
        for row in rows:
            blocks.append(Text.assemble((row[0], "bold"), "  ", _status(row[1])))
            blocks.append(Packed([f"{head} {value}" for head, value in zip(heads[2:], row[2:], strict=True)]))
        return Group(*blocks)

    # (The tight table's width is its columns' and their gaps': a measure
    # of it said more, and a table that fits was stacked.)
    rooms = Fitted((table(False), None), (table(True), sum(widths) + 2 * (len(heads) - 1)), (stacked(), None))
    # A room whose target no rate meets says so under the table, and one
    # whose settings are not all the code's.
    notes = [
        Text(f"{name}: {row['health_reason']}", style="yellow")
        for name, row in zip(names, stats, strict=True)
        if row.get("out_of_reach_ms", -1) >= 0
    ]
    notes += [
        Text(f"{name}: {_set_names(row['run_time'])} set at run time (queuegate show {name})", style="yellow")
        for name, row in zip(names, stats, strict=True)
        if row["run_time"]
    ]
    return Group(rooms, *notes) if notes else rooms


def _set_names(names: list[str]) -> str:
    """The settings set at run time, by name, rate and per said as the one
    pair they are: `--rate` alone sets both (per kept with it), and "rate,
    per" read as if `--per` had been given too."""
    if {"rate", "per"} <= set(names):
        names = ["rate/per (one pair)" if name == "rate" else name for name in names if name != "per"]
    return ", ".join(names)


class Fitted:
    """The first of ``choices`` that fits the console's width whole, else
    the last (the list's table: one header line where it fits, for grep
    and cut when piped; then headers wrapping; then a room a block)."""

    def __init__(self, *choices: tuple[RenderableType, int | None]) -> None:
        self.choices = choices  # each with its width, or None: measured

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # (Measured without the width, which caps what a measure says.)
        unbounded = options.update(max_width=10**6)
        for choice, width in self.choices[:-1]:
            if (width or Measurement.get(console, unbounded, choice).maximum) <= options.max_width:
                yield choice
                return
        yield self.choices[-1][0]


class Packed:
    """Labelled figures (``waiting 3``) on lines as wide as the console,
    ``·`` between them, indented: each whole on one line (wrapped as text,
    a label ended one line and its figure began the next)."""

    def __init__(self, items: list[str], indent: int = 2) -> None:
        self.items, self.indent = items, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width - self.indent)
        lines: list[str] = []
        for item in self.items:
            joined = f"{lines[-1]} · {item}" if lines else item
            if lines and cell_len(joined) <= width:
                lines[-1] = joined
            else:
                lines.append(item)
        for line in lines:
            yield Padding(Text(line), (0, 0, 0, self.indent))


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


Rows = Callable[[dict[str, Any]], list[tuple[str, str]]]
# The settings each row of show's settings says, where not only its own.
ROW_SETTINGS = {
    "rate": ("rate", "per"),
    "session": ("session", "sliding"),
    "floor / ceiling": ("floor", "ceiling"),
}
CONTROLLER = ("target_ms", "max_errors", "floor", "ceiling", "settle")


def _sourced(rows: Rows, stats: dict[str, Any]) -> Table:
    """The rows, each with where its value comes from when not the code:
    an operator at run time, or the admission controller, and what the
    code says (as the app's processes last told Redis)."""
    grid = _grid()
    grid.add_column(style="yellow")
    operator, held = set(stats["run_time"]), {stats["controlled"]} - {""}
    code = dict(rows({**stats, **stats["code"]}))
    for label, said in rows(stats):
        names = set(ROW_SETTINGS.get(label, (label,)))
        if label == "target_ms" and stats["target_ms"] <= 0:
            names = set(CONTROLLER)  # the one row of a room without a controller
        source = names & (operator | held)
        if not source:
            grid.add_row(label, said)
            continue
        if names & operator and names & held:
            # (The rate the controller holds, its interval an operator's.)
            who = f"{', '.join(sorted(names & held))} set by the admission controller, " + (
                f"{', '.join(sorted(names & operator))} at run time"
            )
        elif names & operator and stats.get("held") in names and not held:
            # (A value the controller left when it was switched off: `--target-ms 0`.)
            who = "left by the admission controller, which is off"
        else:
            who = "set at run time" if names & operator else "set by the admission controller"
        if not source <= set(stats["code"]):
            note = f"{who}; the code's value is not known"
        elif code.get(label) == said:
            note = f"{who}, the same as the code"
        elif label in code:
            note = f"{who}; code: {code[label]}"
        else:
            values = (f"{name} {readable(name, stats['code'][name])}" for name in sorted(source))
            note = f"{who}; code: {', '.join(values)}"
        grid.add_row(label, said, note)
    return grid


def _settings_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    now = stats["now"]
    per = milliseconds(stats["per"])
    forget = stats["forget"]
    rows = [
        ("status", stats["status"]),
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
        (
            "forget",
            "never (queuegate forget deletes the room)"
            if forget <= 0
            else f"{milliseconds(forget)} after the last call, with its line",
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
        ("settle", f"at least {milliseconds(stats['settle'])} for a change to show"),
        ("pinned", "yes: the operator set the rate" if stats["pinned"] else "no: the controller sets it"),
        ("p95_ms", _p95(stats)),
        ("error_rate", f"{percent(stats['error_rate'])} of {count(stats['samples'], 'response')}"),
        ("health_reason", stats["health_reason"] or UNKNOWN),
        ("last change", changed),
    ]


def _p95(stats: dict[str, Any]) -> str:
    """The controller's p95, and how old it is once no response has been
    measured for a while (the figures are those of its last look)."""
    said = f"{milliseconds(stats['p95_ms'])} (first byte {milliseconds(stats['first_byte_p95_ms'])})"
    if health_age_ms(stats):
        said += f", read {clock(stats['health_at'], stats['now'])}: no response measured since"
    return said


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
    if stats["unlimited"]:
        # Said where the operator looks first (stats.lua: a deploy can
        # leave a room so under a run-time value).
        title.append(
            "\nlets everyone in: rate and capacity are both 0 (no limit); "
            f"`queuegate set {args.room} --reset all` goes back to the code's",
            style="bold red",
        )
    line = _grid()
    line.add_row("waiting", count(stats["waiting"], "visitor"))
    line.add_row("active", count(stats["active"], "session"))
    line.add_row("wait at the back", milliseconds(stats["eta_back_ms"]))
    line.add_row("admitting", f"{per_minute(stats['per_minute'])} lately")
    line.add_row("sessions ending", f"{per_minute(stats['ended_per_minute'])} lately")
    if stats["tokens"] >= 0:
        step = stats.get("step", stats["per"])
        if step == stats["per"]:
            # What is left is the interval's own: after a change of rate,
            # of the rate before it ("1 of 30" read as the new rate's).
            left = f"{stats['tokens']:,} left this interval, then {stats['rate']:,} an interval"
            line.add_row("tokens", left)
        else:  # a room with a health target lets its rate in evenly (advance.lua)
            line.add_row(
                "tokens",
                f"{stats['tokens']:,} left this {milliseconds(step)} step, then {stats['step_n']:,} a step "
                "(the rate let in evenly, as a room with a health target is)",
            )
    totals = _grid()
    for key in ("joined", "admitted", "abandoned", "expired", "released", "left", "drained"):
        said = count(stats[key], "visitor")
        if key == "joined":
            said += " (took a place in the line; one let straight in never joins)"
        totals.add_row(key, said)
    # Newcomers turned away (429): many at once, behind a proxy the gate
    # does not know, is every visitor counted as one client.
    totals.add_row("refused a place", f"{count(stats['limited'], 'time')} (client limit)")
    settings = _sourced(_settings_rows, stats)
    controller = _sourced(_controller_rows, stats)
    # None yet: said so, not "(p50 —, p90 —, p99 —, max —)". Each kind's
    # figures on a line of their own where the line does not fit: on 80
    # columns "max 1 min" wrapped over "3 s".
    whole, split = [], []
    for kind, values in figures["waits"].items():
        head = f"waits of those {'admitted' if kind == 'admitted' else 'who gave up'}: "
        if not values["count"]:
            whole.append(head + "none yet")
            split.append(head + "none yet")
            continue
        quantiles = ", ".join(f"{q} {milliseconds(values[q + '_ms'])}" for q in ("p50", "p90", "p99", "max"))
        whole.append(f"{head}{values['count']:,} ({quantiles})")
        split.append(f"{head}{values['count']:,}\n  {quantiles}")
    estimate = figures["estimate"]
    accuracy = "estimates within 20 % of the real wait: " + (
        f"{percent(estimate['share'])} of " + count(estimate["checked"], "estimate")
        if estimate["checked"]
        else "none checked yet (nobody admitted from the line)"  # not "— of 0 estimates"
    )
    waits = Fitted(
        (Text("\n".join([*whole, accuracy]), no_wrap=True), None), (Text("\n".join([*split, accuracy])), None)
    )
    parts: list[RenderableType] = [
        title,
        _heading("The line"), _indent(line),
        _heading("Since the room was made"), _indent(totals),
        _heading("Settings"), _indent(settings),
        _heading("Admission controller"), _indent(controller),
        _heading("Waits"), _indent(waits),
    ]  # fmt: skip
    if args.visitors:
        parts += [_heading("Who"), _indent(_who(visitors, now, stats))]
    return Group(*parts)


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _heading(text: str) -> Text:
    return Text("\n" + text, style="bold underline")


def _who(visitors: dict[str, list[tuple[str, int]]], now: int, stats: dict[str, Any]) -> RenderableType:
    rows = max(len(visitors["waiting"]), len(visitors["active"]))
    if not rows:
        return Text("nobody waiting, nobody active")

    def table(split: bool, wrap: bool = False) -> Table:
        # Split: a session's end under its visitor, whole; on 80 columns the
        # end wrapped mid-duration, "(in 9 min" over "1 s)". Where even that
        # is too wide, the split table wraps (unwrapped, rich dropped the
        # row numbers and cut the ids and ends with "…").
        made = _table()
        made.add_column("", justify="right")
        made.add_column("waiting (arrival number)", no_wrap=not wrap)
        made.add_column("active (session ends)", no_wrap=not wrap)
        between = "\n" if split else " "
        for i in range(rows):
            waiting = visitors["waiting"][i] if i < len(visitors["waiting"]) else None
            active = visitors["active"][i] if i < len(visitors["active"]) else None
            made.add_row(
                str(i + 1),
                "" if waiting is None else f"{waiting[0]} (#{waiting[1]:,})",
                "" if active is None else f"{active[0]},{between}until {clock(active[1], now)}",
            )
        # The list is the first few (--visitors): how many it leaves out.
        more = [stats[kind] - len(visitors[kind]) for kind in ("waiting", "active")]
        if any(more):
            made.add_row("", *(f"and {n:,} more" if n > 0 else "" for n in more))
        return made

    # The split table's width is its cells' (headers wrap; rich's measure
    # of it counted them whole and gave up a table that fits).
    cells = [
        [str(rows)],
        [f"{v} (#{n:,})" for v, n in visitors["waiting"]],
        [line for v, at in visitors["active"] for line in (f"{v},", f"until {clock(at, now)}")],
    ]
    for column, kind in zip(cells[1:], ("waiting", "active"), strict=True):
        column.append(f"and {stats[kind] - len(visitors[kind]):,} more")
    split = sum(max(map(len, column), default=0) for column in cells) + 3 * (len(cells) - 1)
    return Fitted((table(False), None), (table(True), split), (table(True, wrap=True), None))
