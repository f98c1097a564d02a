"""``queuegate activity [ROOM]``: who changed what, and when, as the back
office's activity list shows it (the rooms' own logs in Redis, and what
concerns no one room)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..console import clock, plain
from .session import Bounded, Output

LONG = 120  # characters of a change's settings past which each goes on a line of its own


def change_texts(details: dict[str, Any]) -> list[str]:
    """A change's settings for people: each one set, and those reset to
    the code's together."""
    said, reset = [], []
    for name, value in details.items():
        if value is None and name != "pinned":
            reset.append(name)
        elif value is None:
            said.append("pinned off (back to the controller)")
        else:
            # A whole number of seconds as the back office's list says it:
            # "per 10", not "per 10.0".
            said.append(f"{name} {json.dumps(plain(value))}")
    if len(reset) == 1:
        said.append(f"{reset[0]} reset to the code's value")
    elif reset:
        said.append("reset to the code's values: " + ", ".join(reset))
    return said


async def _activity(ask: Bounded, args: argparse.Namespace) -> Output:
    store = ask.store
    if args.room:
        await ask(store.stats(args.room))  # an unknown room is said, with the rooms there
        entries = await ask(store.activity(args.room, args.count))
    else:
        entries = await ask(store.latest_activity(args.count))
    if args.json:
        return json.dumps(entries)
    if not entries:
        return "no changes yet" + (f" in room {args.room!r}" if args.room else "")
    now = store.redis_now_ms()
    lines = []
    for entry in entries:
        room = "" if entry["room"] is None else f"{entry['room']} · "
        head = f"{clock(entry['at'], now)} · {entry['who']} · {room}{entry['action']}"
        details = change_texts(entry.get("details") or {})
        if len(details) > 2 or len(", ".join(details)) > LONG:
            lines.append(head + ":")
            lines += [f"  {detail}" for detail in details]
        else:
            lines.append(head + (": " + ", ".join(details) if details else ""))
    return "\n".join(lines)
