"""``list --watch`` and ``show ROOM --watch``: the view again every few
seconds until Ctrl-C. On a terminal the screen is redrawn; piped, each view
is a new block (JSON: a line each), so a log or ``grep`` keeps them all.

The first view fails as any command does (one line, status 1: a wrong URL
or room name is said at once). After it, a failing call is shown in place
of the view and asked again at the next round: an operator watching a
launch wants the numbers back when Redis is, not a console to restart.

``list --watch`` finds the rooms (a scan of the whole keyspace, which holds
a key or two per visitor) once every ``NAMES_EVERY`` seconds, not every
round; a room gone in between is left out of the table until then."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from rich.console import Console, Group
from rich.text import Text

from ..console import clock, duration, make_console, show
from ..store import StoreError, UnknownRoom, redacted
from .commands import COMMANDS, rooms_named
from .session import Bounded, Output, opened
from .views import _list

__all__ = ["watch"]

NAMES_EVERY = 30.0  # seconds between two scans for the rooms' names under --watch


def watch(args: argparse.Namespace, url: str) -> int:
    """Run ``args.command`` every ``args.watch`` seconds; 0 at Ctrl-C."""
    try:
        asyncio.run(_rounds(args, url, make_console()))
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # The reader stopped (`| head`): ours is to stop too, quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class _Names:
    """The rooms' names for ``list --watch``: scanned again after
    ``NAMES_EVERY`` seconds (a room gone in between is left out of the
    table: ``each_room``)."""

    def __init__(self) -> None:
        self.names: list[str] | None = None
        self.at = 0.0

    async def view(self, ask: Bounded, args: argparse.Namespace) -> Output:
        if self.names is None or time.monotonic() - self.at >= NAMES_EVERY:
            self.names, self.at = await ask(ask.store.room_names()), time.monotonic()
        return await _list(ask, args, self.names)  # one gone since is left out


async def _rounds(args: argparse.Namespace, url: str, console: Console) -> None:
    names = _Names()

    async def _view(ask: Bounded, args: argparse.Namespace) -> Output:
        if args.command == "list":
            return await names.view(ask, args)
        return await COMMANDS[args.command](ask, args)

    async with opened(args, url) as ask:
        started = time.monotonic()
        output = await rooms_named(ask, args, _view(ask, args))  # a first failure is the command's
        trouble, failing_since = "", ""
        while True:
            _draw(console, args, output, trouble)
            await asyncio.sleep(max(0.0, args.watch - (time.monotonic() - started)))
            started = time.monotonic()
            try:
                output = await _view(ask, args)
                trouble = failing_since = ""
            except (StoreError, UnknownRoom) as exc:
                failing_since = failing_since or _now()
                # (A room gone is a StoreError too: said as what it is.)
                said = (
                    f"{exc}, on Redis at {redacted(url)}"
                    if isinstance(exc, UnknownRoom)
                    else f"cannot reach Redis at {redacted(url)} ({exc})"
                )
                trouble = f"{said}, since {failing_since}; trying again every {duration(args.watch)}"


def _now() -> str:
    return clock(round(time.time() * 1000))


def _draw(console: Console, args: argparse.Namespace, output: Output, trouble: str) -> None:
    """The view, or what went wrong (with JSON, on stderr: stdout keeps
    one JSON document a line)."""
    if args.json:
        print(trouble or output, file=sys.stderr if trouble else sys.stdout, flush=True)
        return
    what = "list" if args.command == "list" else f"show {args.room}"
    header = f"queuegate {what}: every {duration(args.watch)}, at {_now()} (Ctrl-C stops)"
    if console.is_terminal:
        body = Text(trouble, style="red") if trouble else Text(output) if isinstance(output, str) else output
        with console.capture() as captured:
            console.print(Group(Text(header, style="dim"), Text(""), body))
        console.clear()
        console.file.write(captured.get())
    elif trouble or isinstance(output, str):
        console.file.write(f"{header}\n\n{trouble or output}\n\n")  # whole, not cut at a width
    else:
        show(Group(Text(header), Text(""), output), console.file)
        console.file.write("\n")
    console.file.flush()
