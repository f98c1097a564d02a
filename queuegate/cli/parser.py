"""The console's command line: its options, each checked with one error naming it."""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from .. import COMPILED, __version__
from ..analytics import KEEP_MINUTES
from ..checks import ROOM_SETTINGS
from ..readings import ACTIVITY_KEEP

T = TypeVar("T")
WATCH_EVERY = 2.0  # seconds between two views of --watch
URL = "the Redis URL (--redis, QUEUEGATE_REDIS_URL)"  # as a wrong one's error names it
# A room argument, as every command that takes one says it (it was bare: "room").
ROOM_HELP = "the room's name, as queuegate list shows it"


class CommandError(Exception):
    """A one-line message for the operator; the exit status rides along."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    """Bad values are one line on stderr, naming the option, and status 2.

    Only whole option names: an abbreviation's meaning changes as options
    are added (``serve-admin --p`` meant ``--port`` until every command
    took ``--prefix``), so a script's ``--p 9000`` would one day be an
    error or another option. An unknown option is named in the error, with
    the ones it may have meant: those it begins, else those spelt most
    like it.

    argparse finds an unknown option too, but only once it has parsed the
    words around it: before the command, the unknown option's value is
    taken for the command (``--red URL list`` said ``invalid choice:
    'URL'``), the error names the top parser whatever command it was given
    to, and it suggests nothing. So the words before a command are checked
    here first, against argparse's own table of this parser's options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.commands: dict[str, Parser] = {}
        kwargs["allow_abbrev"] = False  # the commands' parsers are Parsers too
        super().__init__(*args, **kwargs)

    def add_subparsers(self, **kwargs: Any) -> Any:
        commands = super().add_subparsers(**kwargs)
        self.commands = commands.choices  # filled by each add_parser
        return commands

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        arguments = list(sys.argv[1:] if args is None else args)
        # What comes after the command is the command's parser's to check.
        ours = next((i for i, word in enumerate(arguments) if word in self.commands or word == "--"), None)
        # (argparse's table: an option added through a group is in it too)
        options = self._option_string_actions
        for argument in arguments[:ours]:
            name = argument.split("=", 1)[0]
            # (argparse takes a word with a space for a value, not an option)
            if name.startswith("--") and " " not in name and name not in options:
                self.error(f"unknown option {name}{_meant(name, options)}")
        return super().parse_known_args(arguments, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _meant(name: str, options: Iterable[str]) -> str:
    """What an unknown option may have meant: the whole names it begins
    (an abbreviation), else those spelt most like it (``--satus``)."""
    known = sorted(option for option in options if option.startswith("--"))
    begun = [option for option in known if option.startswith(name)]
    if begun:
        return f": options are not abbreviated (did you mean {' or '.join(begun)}?)"
    # (compared without the dashes, which every name shares)
    like = difflib.get_close_matches(name[2:], [option[2:] for option in known], n=3)
    return f" (did you mean {' or '.join('--' + option for option in like)}?)" if like else ""


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
exit status, with nothing changed. Add --json to list, show, activity, seed
and simulate for scripts; without it, tables (in colour on a terminal).

examples:
  queuegate list
  queuegate show sale
  queuegate set sale --rate 20 --per 10
  queuegate activity sale
  queuegate simulate --url http://127.0.0.1:8000/checkout --visitors 200
"""


def _where(parser: argparse.ArgumentParser, *, given_only: bool = False) -> None:
    """Where the rooms are: the options every command takes. ``given_only``
    (a command's own parser): set only when given, so that they may come
    after the command too (``queuegate list --redis URL``) without a
    command's defaults overriding those given before it."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if given_only else value

    parser.add_argument(
        "--redis", metavar="URL", default=default(None), help="Redis URL (default: $QUEUEGATE_REDIS_URL)"
    )
    parser.add_argument(
        "--prefix",
        type=_prefix,
        default=default(os.environ.get("QUEUEGATE_PREFIX", "qg")),
        help="key prefix (default: $QUEUEGATE_PREFIX or qg)",
    )
    parser.add_argument(
        "--timeout",
        type=SECONDS,
        default=default(2.0),
        metavar="SECONDS",
        help="give up each call to Redis after this long (default: 2)",
    )


def _watch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watch",
        nargs="?",
        const=WATCH_EVERY,
        type=_ranged(float, 0.5),
        metavar="SECONDS",
        help=f"show it again every SECONDS (default: {WATCH_EVERY:g}) until Ctrl-C: redrawn on a terminal, "
        "a new block each time when piped (with --json, a line each); if Redis stops answering, "
        "says so and keeps trying",
    )


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="queuegate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build = "the request path compiled with mypyc" if COMPILED else "pure Python"
    parser.add_argument("--version", action="version", version=f"queuegate {__version__} ({build})")
    _where(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="every room with its live numbers")
    listing.add_argument("--json", action="store_true", help="as JSON")
    _watch(listing)

    show = commands.add_parser("show", help="one room: numbers, settings, head of the line")
    show.add_argument("room", help=ROOM_HELP)
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
    _watch(show)

    log = commands.add_parser("activity", help="who changed what, and when: a room's log, or every room's")
    log.add_argument("room", nargs="?", help="one room (default: every room, and what concerns none)")
    log.add_argument(
        "--count",
        type=_ranged(int, 1, ACTIVITY_KEEP),
        default=20,
        metavar="N",
        help=f"how many changes, newest first (1-{ACTIVITY_KEEP}, default: 20)",
    )
    log.add_argument("--json", action="store_true", help="as JSON")

    office = commands.add_parser(
        "serve-admin", help="serve the back office (its sign-in secret from $QUEUEGATE_ADMIN_SECRET)"
    )
    office.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface, "
        "behind TLS)",
    )
    office.add_argument(
        "--port", type=_ranged(int, 1, 65535), default=8400, help="port to listen on (default: 8400)"
    )

    change = commands.add_parser("set", help="change a room's run-time settings")
    change.add_argument("room", help=ROOM_HELP)
    change.add_argument(
        "--rate", type=int, help="visitors admitted per interval (0: no limit; only beside a capacity)"
    )
    change.add_argument("--per", type=float, help="interval, seconds")
    change.add_argument("--capacity", type=int, help="most active sessions (0: no limit)")
    change.add_argument("--session", type=float, help="session length, seconds")
    change.add_argument("--sliding", action=argparse.BooleanOptionalAction, help="renew sessions")
    change.add_argument("--abandon", type=float, help="skip waiting visitors silent this long, seconds")
    change.add_argument("--max-step", type=int, dest="max_step", help="most visitors moved per call")
    change.add_argument(
        "--forget",
        type=float,
        help="expire the room this long after its last call, seconds (0: never; to delete it now: forget)",
    )
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
    change.add_argument(
        "--floor",
        type=int,
        help="the controller's lowest rate (or capacity); --reset floor gives the code's back",
    )
    change.add_argument("--ceiling", type=int, help="the controller's highest rate (or capacity), 0: none")
    change.add_argument(
        "--settle",
        type=float,
        help="the least time a change of the rate gets to show before the controller probes for more, "
        "takes a graded step or moves after a lowering, seconds (a cut does not wait; the visit it "
        "measures lengthens it)",
    )
    change.add_argument(
        "--auto", action="store_true", help="give the rate (or capacity) back to the controller after --rate"
    )
    change.add_argument(
        "--reset",
        action="append",
        default=[],
        metavar="SETTING",
        help=(
            "back to the code's value: all (every setting) or one of "
            + ", ".join(ROOM_SETTINGS)
            + "; rate or per resets both (one pair)"
        ),
    )

    for name, text in (
        ("release", "end an admitted visitor's session (with a capacity, the next in line gets the place)"),
        ("remove", "take a visitor out of the room, from the line or inside"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("room", help=ROOM_HELP)
        sub.add_argument("visitor", help="the visitor's id (queuegate show ROOM lists the first)")

    drain = commands.add_parser("drain", help="empty the line (active sessions run on)")
    drain.add_argument("room", help=ROOM_HELP)
    drain.add_argument("--yes", action="store_true", help="confirm: everyone waiting loses their place")

    forget = commands.add_parser(
        "forget", help="delete a room left behind (renamed, a test) and all Redis holds of it"
    )
    forget.add_argument("room", help=ROOM_HELP)
    forget.add_argument(
        "--yes",
        action="store_true",
        help="confirm: its counters, run-time settings, analytics and activity log go for good",
    )

    seed = commands.add_parser("seed", help="reveal the room's draw seed, to publish after the draw")
    seed.add_argument("room", help=ROOM_HELP)
    seed.add_argument(
        "--yes", action="store_true", help="confirm: whoever sees the seed can predict the room's draws"
    )
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
    for name, command in commands.choices.items():
        if name != "simulate":  # (it asks a URL of the app, not Redis)
            _where(command, given_only=True)
    return parser
