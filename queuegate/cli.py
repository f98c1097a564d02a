"""The operator's console: ``queuegate list|show|set|release|remove|drain|seed|simulate|serve-admin``.

It talks to the same Redis as the app (``--redis`` or ``QUEUEGATE_REDIS_URL``)
and goes through the same scripts, so a change applies in every app process at
its next request. Errors are one line on stderr and a non-zero exit status,
with nothing changed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .settings import ROOM_SETTINGS, ConfigError
from .simulate import Progress, simulate
from .store import Store, StoreError, UnknownRoom, connect, operator_name, redacted

__all__ = ["main"]

DURATIONS = ("per", "session", "abandon", "settle")  # ms in Redis, seconds on the command line


class CommandError(Exception):
    """A one-line message for the operator; the exit status rides along."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuegate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", help="Redis URL (default: $QUEUEGATE_REDIS_URL)")
    parser.add_argument("--prefix", default=os.environ.get("QUEUEGATE_PREFIX", "qg"), help="key prefix")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for Redis")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="every room with its live numbers")
    listing.add_argument("--json", action="store_true")

    show = commands.add_parser("show", help="one room: numbers, settings, head of the line")
    show.add_argument("room")
    show.add_argument("--visitors", type=int, default=5, help="how many waiting and active ids to list")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--minutes", type=int, default=60, help="how many one-minute points of the line to give with --json"
    )

    office = commands.add_parser(
        "serve-admin", help="serve the back office (its sign-in secret from $QUEUEGATE_ADMIN_SECRET)"
    )
    office.add_argument("--host", default="127.0.0.1")
    office.add_argument("--port", type=int, default=8400)

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
    seed.add_argument("--json", action="store_true")

    sim = commands.add_parser("simulate", help="virtual visitors against a gated URL (a load test)")
    sim.add_argument("--url", required=True, help="a gated page, e.g. http://127.0.0.1:8000/checkout")
    sim.add_argument("--visitors", type=int, default=100)
    sim.add_argument("--concurrency", type=int, default=50, help="most visitors at once")
    sim.add_argument("--give-up", type=float, default=0.2, help="share of visitors who leave early")
    sim.add_argument("--patience", type=float, nargs=2, default=(5.0, 60.0), metavar=("MIN", "MAX"))
    sim.add_argument("--max-seconds", type=float, default=600.0, help="stop the run after this long")
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


async def _list(store: Store, args: argparse.Namespace) -> str:
    rows = [{"room": name, **_readable(await store.stats(name))} for name in await store.room_names()]
    if args.json:
        return json.dumps(rows)
    if not rows:
        return "no rooms yet"
    columns = ("room", "status", "waiting", "active", "per_minute", "eta_back", "admitted", "abandoned")
    table = [columns, *[tuple("-" if row[c] is None else str(row[c]) for c in columns) for row in rows]]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in table)


async def _show(store: Store, args: argparse.Namespace) -> str:
    stats = _readable(await store.stats(args.room))
    visitors = await store.visitors(args.room, args.visitors)
    figures = await store.analytics(args.room, minutes=args.minutes)
    if args.json:
        return json.dumps({"room": args.room, **stats, "visitors": visitors, "analytics": figures})
    lines = [f"room {args.room}"] + [f"  {key}: {value}" for key, value in stats.items()]
    lines.append(f"  first waiting: {', '.join(v for v, _ in visitors['waiting']) or '-'}")
    lines.append(f"  active: {', '.join(v for v, _ in visitors['active']) or '-'}")
    for kind, waits in figures["waits"].items():
        quantiles = ", ".join(f"{q} {_seconds(waits[q + '_ms'])}" for q in ("p50", "p90", "p99"))
        who = "admitted" if kind == "admitted" else "who gave up"
        lines.append(f"  waits of those {who}: {waits['count']} ({quantiles})")
    estimate = figures["estimate"]
    share = "-" if estimate["share"] is None else f"{estimate['share']:.0%}"
    lines.append(f"  estimates within 20 % of the real wait: {share} of {estimate['checked']}")
    return "\n".join(lines)


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.0f} s"


async def _set(store: Store, args: argparse.Namespace) -> str:
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
    await store.stats(args.room)  # an unknown room fails here, before anything is written
    await store.configure(args.room, **changes)
    shown = {k: ("auto" if k == "pinned" else "default") if v is None else v for k, v in changes.items()}
    return f"{args.room}: " + ", ".join(f"{k}={v}" for k, v in shown.items())


async def _release(store: Store, args: argparse.Namespace) -> str:
    done = await store.release(args.room, args.visitor, who=store.actor)
    return f"{args.visitor}: {'released' if done else 'held no place'}"


async def _remove(store: Store, args: argparse.Namespace) -> str:
    done = await store.leave(args.room, args.visitor, who=store.actor)
    # Either way every process drops its copy of the visitor's admission.
    return f"{args.visitor}: {'removed' if done else 'held no place in Redis; any copy revoked'}"


async def _drain(store: Store, args: argparse.Namespace) -> str:
    if not args.yes:
        raise CommandError("drain: everyone waiting would lose their place; add --yes to confirm", 2)
    return f"{args.room}: {await store.drain(args.room)} visitors removed from the line"


async def _seed(store: Store, args: argparse.Namespace) -> str:
    stats = await store.stats(args.room)
    seed = await store.seed(args.room)
    await store.note(args.room, "reveal seed", {"seed_sha256": stats["seed_sha256"]})
    if args.json:
        return json.dumps({"room": args.room, "seed": seed, "seed_sha256": stats["seed_sha256"]})
    return f"seed {seed}\nsha256 {stats['seed_sha256']}"


COMMANDS: dict[str, Callable[[Store, argparse.Namespace], Awaitable[str]]] = {
    "list": _list,
    "show": _show,
    "set": _set,
    "release": _release,
    "remove": _remove,
    "drain": _drain,
    "seed": _seed,
}


async def _run(args: argparse.Namespace, url: str) -> str:
    # Every change is logged in its room's activity log under this name.
    store = Store(connect(url, args.timeout), args.prefix, actor=operator_name("console"))
    try:
        return await COMMANDS[args.command](store, args)
    finally:
        await store.aclose()


def _progress_bar(progress: Progress) -> None:
    width = 30
    filled = int(width * progress.done / max(1, progress.visitors))
    print(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {progress.done}/{progress.visitors}  "
        f"admitted {progress.admitted}  waiting {progress.waiting}  gave up {progress.gave_up}  "
        f"errors {progress.errors}",
        end="",
        file=sys.stderr,
        flush=True,
    )


def _simulate(args: argparse.Namespace) -> int:
    if not args.url.startswith(("http://", "https://")):
        raise CommandError("simulate: --url must be an http:// or https:// URL", 2)
    if args.visitors < 1 or args.concurrency < 1 or not 0 <= args.give_up <= 1:
        raise CommandError("simulate: --visitors and --concurrency >= 1, --give-up between 0 and 1", 2)
    progress = asyncio.run(
        simulate(
            args.url,
            args.visitors,
            args.concurrency,
            give_up=args.give_up,
            patience=tuple(args.patience),
            max_seconds=args.max_seconds,
            seed=args.seed,
            on_progress=None if args.json else _progress_bar,
        )
    )
    summary = progress.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(file=sys.stderr)
        print("  ".join(f"{key}={value}" for key, value in summary.items() if value is not None))
    return 0 if progress.errors == 0 else 1


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

    office = admin.app(Store(connect(url, args.timeout), args.prefix), secret=secret)
    print(f"queuegate back office: http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(office, host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "simulate":
        try:
            return _simulate(args)
        except CommandError as exc:
            print(f"queuegate: {exc}", file=sys.stderr)
            return exc.status
    url = args.redis or os.environ.get("QUEUEGATE_REDIS_URL")
    try:
        if not url:
            raise CommandError("no Redis: pass --redis redis://host:6379/0 or set QUEUEGATE_REDIS_URL", 2)
        if args.command == "serve-admin":
            return _serve_admin(args, url)
        print(asyncio.run(_run(args, url)))
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
