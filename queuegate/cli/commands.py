"""The console's commands that change rooms (set, release, remove, drain,
seed, forget), and the table of every command against Redis."""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..console import clock, count, plain
from ..risks import RISKS_UNKNOWN, risks
from ..settings import ROOM_SETTINGS
from ..stats import readable
from ..store import StoreError, UnknownRoom
from .activity import _activity
from .parser import CommandError
from .session import Bounded, Output, opened
from .views import _list, _show

FEW_SESSIONS = 5  # sessions left in a room refused a forget that are said one by one, to release


async def _set(ask: Bounded, args: argparse.Namespace) -> Output:
    changes: dict[str, Any] = {name: getattr(args, name) for name in ROOM_SETTINGS}
    changes = {name: value for name, value in changes.items() if value is not None}
    if args.auto:
        if "rate" in changes or "capacity" in changes:
            raise CommandError(
                "set: --auto gives the rate back to the controller, and --rate or --capacity pins it", 2
            )
        changes["pinned"] = None
    reset_all = "all" in args.reset
    for name in args.reset:
        if name == "all":
            continue  # every setting not given beside it (configure.lua)
        if name not in ROOM_SETTINGS:
            raise CommandError(
                f"--reset: unknown setting {name!r} (all, or one of {', '.join(ROOM_SETTINGS)})", 2
            )
        if changes.get(name) is not None:
            # (Beside `all`, a value given wins: it is what `all` leaves.)
            raise CommandError(f"set: --{name.replace('_', '-')} and --reset {name} contradict: give one", 2)
        changes[name] = None
    if not changes and not reset_all:
        raise CommandError("set: name at least one setting to change, e.g. --rate 20", 2)
    # The room's figures around the change, for what it risks (an unknown
    # room is refused here, before anything is written). The change is one
    # call: what a reset finds set, a pin too, is read in it, not before it:
    # a pin another operator makes meanwhile is reset, or made after it.
    before = await ask(ask.store.stats(args.room))
    written = await ask(ask.store.configure(args.room, reset_all=reset_all, **changes))
    after: dict[str, Any] = {}
    try:
        after = await ask(ask.store.stats(args.room))
        said_risks = risks(before, after)
    except StoreError:
        said_risks = [f"{RISKS_UNKNOWN}: check it with show"]  # made: a failure now is not "nothing changed"
    warnings = "".join(f"\nwarning: {risk}" for risk in said_risks)
    if reset_all:
        were = written.pop("reset_all").replace(",", ", ") or "none"
        kept = {name: value for name, value in written.items() if value != ""}
        said = f"{args.room}: every {'other ' if kept else ''}setting back to the code's"
        return (
            f"{said} (set at run time before: {were})"
            + (f"; {_shown(kept, after)}" if kept else "")
            + warnings
        )
    said = f"{args.room}: {_shown(written, after)}"
    # Rate and per are one pair (configure.lua): the half not asked for is said.
    other = [name for name in written if name in ("rate", "per") and name not in changes]
    if other:
        done = "reset with it" if written[other[0]] == "" else "kept with it"
        said += f" ({other[0]} {done}: rate and per are one pair)"
    return said + warnings


def _shown(written: dict[str, str], after: dict[str, Any]) -> str:
    """Fields as configure.lua wrote them, for people: ``rate=5, per=1``
    (seconds for durations, whole ones without a decimal point); a reset
    one with the code's value it is back to, from the room's stats
    ``after`` the change (when read)."""
    shown = []
    for name, value in written.items():
        if name == "pinned":
            shown.append(
                "pinned=auto"
                if value == ""
                else "pinned: the controller no longer moves it (`--auto` gives it back)"
            )
        elif value == "":
            code = after.get(name)
            shown.append(
                f"{name} back to the code's" + ("" if code is None else f" ({_plain(readable(name, code))})")
            )
        else:
            shown.append(f"{name}={_plain(readable(name, int(value))) if value.isdigit() else value}")
    return ", ".join(shown)


def _plain(value: Any) -> Any:
    """A whole float as an int (10 for a duration of 10.0 s); any other
    value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A visitor id that holds no place (mistyped, admitted and gone, already
# removed) is an error a script can see: status 1, as an unknown room.
NO_PLACE = (
    "{visitor}: holds no {what} in room {room!r}{more} (the ids are in `queuegate show {room}`; a visitor "
    "whose session ended or who left has none)"
)


async def _release(ask: Bounded, args: argparse.Namespace) -> Output:
    if not await ask(ask.store.release(args.room, args.visitor, who=ask.store.actor)):
        more = "; one still in line stays there: `remove` takes them out"
        said = NO_PLACE.format(visitor=args.visitor, what="admission", room=args.room, more=more)
        raise CommandError("release: " + said)
    return f"{args.visitor}: released"


async def _remove(ask: Bounded, args: argparse.Namespace) -> Output:
    done = await ask(ask.store.leave(args.room, args.visitor, who=ask.store.actor))
    if not done:
        # Either way every process drops its copy of the visitor's admission.
        more = "; any copy of an admission in the app's processes is revoked"
        said = NO_PLACE.format(visitor=args.visitor, what="place", room=args.room, more=more)
        raise CommandError("remove: " + said)
    return f"{args.visitor}: removed"


async def _drain(ask: Bounded, args: argparse.Namespace) -> Output:
    if not args.yes:
        raise CommandError("drain: everyone waiting would lose their place; add --yes to confirm", 2)
    removed = await ask(ask.store.drain(args.room))
    return f"{args.room}: {count(removed, 'visitor')} removed from the line"


async def _seed(ask: Bounded, args: argparse.Namespace) -> Output:
    if not args.yes:
        # As the back office asks before it shows it: a seed shown too early
        # (or in a room whose method turns random later) is a lottery anyone
        # can predict.
        raise CommandError(
            "seed: whoever sees the seed can predict the room's draws (a lottery's admissions, the "
            "pre-queue's order at the opening); reveal it only after the draw: add --yes to confirm",
            2,
        )
    stats = await ask(ask.store.stats(args.room))
    seed = await ask(ask.store.seed(args.room))
    await ask(ask.store.note(args.room, "reveal seed", {"seed_sha256": stats["seed_sha256"]}))
    if args.json:
        return json.dumps({"room": args.room, "seed": seed, "seed_sha256": stats["seed_sha256"]})
    return f"seed {seed}\nsha256 {stats['seed_sha256']}"


async def _ending_now(ask: Bounded, room: str, active: int) -> str:
    """For a room refused a forget: a few sessions left (a tester's, one
    forgotten tab) can be ended now rather than waited out, each by its id."""
    if not 0 < active <= FEW_SESSIONS:
        return ""
    ids = [visitor for visitor, _ in (await ask(ask.store.visitors(room, active)))["active"]]
    if not ids:  # (ended since)
        return ""
    return (
        f", or end {'it' if len(ids) == 1 else 'them'} now: queuegate release {room} ID "
        f"(the session{'' if len(ids) == 1 else 's'} left: {', '.join(ids)})"
    )


async def _forget(ask: Bounded, args: argparse.Namespace) -> Output:
    room = args.room
    if not args.yes:
        # What a forget would lose that the code will not give back.
        stats = await ask(ask.store.stats(room))
        lost = ", ".join(f"{name} {plain(readable(name, stats[name]))}" for name in stats["run_time"])
        # (A room in use is refused even with --yes: said now, not after.)
        waiting, active = stats["waiting"], stats["active"]
        in_use = (
            f"; but it is in use ({count(waiting, 'visitor')} waiting, {count(active, 'session')}), and is "
            f"forgotten only once its line is drained (queuegate drain {room} --yes) and its sessions ended"
            + await _ending_now(ask, room, active)
            if waiting or active
            else ""
        )
        raise CommandError(
            f"forget: room {room!r} and all Redis holds of it (its counters, settings set at run time, seed, "
            "analytics and activity log) would be deleted"
            + (f"; set at run time, and lost: {lost}" if lost else "")
            + in_use
            + "; add --yes to confirm",
            2,
        )
    waiting, active, ends = await ask(ask.store.forget(room))
    if waiting or active:
        last = f", the last ending {clock(ends, ask.store.redis_now_ms())}" if active else ""
        raise CommandError(
            f"forget: room {room!r} is in use ({count(waiting, 'visitor')} waiting, "
            f"{count(active, 'session')}{last}), nothing deleted: its app may still send visitors "
            f"there. Drain its line (queuegate drain {room} --yes) and let the sessions end first"
            + await _ending_now(ask, room, active)
        )
    return (
        f"{room}: forgotten. An app that still has this room in its code makes it again at its next "
        "start or visitor, with the code's settings."
    )


COMMANDS: dict[str, Callable[[Bounded, argparse.Namespace], Awaitable[Output]]] = {
    "list": _list,
    "show": _show,
    "activity": _activity,
    "set": _set,
    "release": _release,
    "remove": _remove,
    "drain": _drain,
    "seed": _seed,
    "forget": _forget,
}


async def _run(args: argparse.Namespace, url: str) -> Output:
    async with opened(args, url) as ask:
        return await rooms_named(ask, args, COMMANDS[args.command](ask, args))


async def rooms_named(ask: Bounded, args: argparse.Namespace, call: Awaitable[Output]) -> Output:
    """``call``'s output; a room it does not find is said with the rooms
    that are there."""
    try:
        return await call
    except UnknownRoom as exc:
        raise UnknownRoom(f"{exc}{await _rooms_there(ask, getattr(args, 'room', ''))}") from None


async def _rooms_there(ask: Bounded, asked: str) -> str:
    """The rooms that are there, for a name that is not (`Checkout` for
    `checkout`): the closest first, ten at most; "" when none or unread."""
    try:
        names = sorted(await ask(ask.store.room_names()))
    except StoreError:
        return ""
    if not names:
        return ""
    lowered = {name.lower(): name for name in names}  # (`A` for `a` scored nothing)
    found = difflib.get_close_matches(asked.lower(), list(lowered), n=1, cutoff=0.6)
    close = [lowered[name] for name in found]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return (f" (did you mean {close[0]!r}? " if close else " (") + f"rooms there: {shown})"
