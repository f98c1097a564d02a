"""The back office's activity log: who changed what, and when.

One capped Redis list per prefix (``<prefix>:admin:activity``, newest first,
the last ``KEEP`` changes), shared by every process that serves the back
office, written after each change succeeds.
"""

from __future__ import annotations

import json
from typing import Any

from ..store import Store

KEEP = 1000


def _key(store: Store) -> str:
    return f"{store.prefix}:admin:activity"


async def record(store: Store, who: str, room: str, action: str, details: dict[str, Any]) -> dict[str, Any]:
    entry = {"at": store.redis_now_ms(), "who": who, "room": room, "action": action, "details": details}
    key = _key(store)
    await store.guard(store.client.lpush(key, json.dumps(entry)))
    await store.guard(store.client.ltrim(key, 0, KEEP - 1))
    return entry


async def latest(store: Store, count: int = 50, room: str | None = None) -> list[dict[str, Any]]:
    """The newest ``count`` entries (of one room, if given), newest first."""
    raw = await store.guard(store.client.lrange(_key(store), 0, KEEP - 1 if room else count - 1))
    entries = [json.loads(item) for item in raw]
    if room is not None:
        entries = [entry for entry in entries if entry["room"] == room]
    return entries[:count]
