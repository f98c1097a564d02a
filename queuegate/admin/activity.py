"""The back office's activity list: who changed what, and when.

Changes to a room are logged by the call that makes them, in the room's
own log (``Store.activity``; activity.lua), whether they come from the
console, the back office or the app's code. What concerns no one room (a
run of virtual visitors) goes in one capped list per prefix,
``<prefix>:admin:activity``. ``Store.latest_activity`` reads them together.
"""

from __future__ import annotations

from typing import Any

from ..readings import ACTIVITY_KEEP
from ..store import Store

KEEP = ACTIVITY_KEEP


async def record(store: Store, who: str, action: str, details: dict[str, Any]) -> dict[str, Any]:
    """Log what concerns no one room (``Store.note_aside``)."""
    return await store.note_aside(who, action, details)


async def latest(store: Store, count: int = 50, room: str | None = None) -> list[dict[str, Any]]:
    """The newest ``count`` entries (of one room, if given), newest first."""
    if room is not None:
        return await store.activity(room, count)
    return await store.latest_activity(count)
