"""Forgetting a room left behind (renamed, a test): every key of it goes,
never while anybody is in it, and a room whose code still runs comes back
whole."""

from __future__ import annotations

import asyncio
import time

import pytest

from queuegate import Room, Store
from queuegate.store import UnknownRoom, connect

from .conftest import ALL_KINDS

SERVER_KINDS = ALL_KINDS  # one room's keys, deleted in one call: one cluster slot

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000  # ms
OLD = Room("old", paths=["/old*"], rate=1, per=10.0, session=60.0)


async def keys_of(store: Store, room: str) -> list[str]:
    found = []
    async for key in store.client.scan_iter(match=f"qg:{{{room}}}:*", count=1000):
        found.append(key.decode() if isinstance(key, bytes) else key)
    return sorted(found)


async def test_forget_deletes_the_room_but_never_while_anybody_is_in_it(store: Store) -> None:
    for i in range(3):
        await store.enter(OLD, f"v{i}", client="10.0.0.1", now=T0)  # v0 in, v1 and v2 waiting
    await store.configure("old", status="paused", now=T0)
    await store.enter(Room("other", paths=["/other*"], rate=1), "w", now=T0)
    # Waiting and active: refused, nothing deleted.
    assert await store.forget("old", now=T0 + 1) == (2, 1, T0 + 60_000)
    assert await store.room_names() == ["old", "other"]
    await store.drain("old", now=T0 + 2)
    assert await store.forget("old", now=T0 + 3) == (0, 1, T0 + 60_000)
    # Once the last session has ended, it goes: every key of it but a
    # client's count, which expires on its own.
    assert await store.forget("old", now=T0 + 60_001) == (0, 0, 0)
    assert await store.room_names() == ["other"]
    assert await keys_of(store, "old") == ["qg:{old}:client:10.0.0.1"]
    with pytest.raises(UnknownRoom):
        await store.stats("old")
    # The app, if it still runs, makes it again with the code's settings.
    again = await store.stats(OLD, now=T0 + 70_000)
    assert (again["status"], again["joined"], again["run_time"]) == ("open", 0, [])


async def test_a_room_made_again_after_forget_has_a_lottery_seed(redis_url: str, server_kind: str) -> None:
    """An app process offers a room its seed until a call stores it, then
    never again: forgotten, the room came back from the app's next call
    with no seed, and its lottery drew from the empty one, which anyone
    can compute. The forget's revocation makes every process offer one
    again."""
    if server_kind == "cluster":
        pytest.skip("no subscription to a cluster (redis-py's asyncio client has no pub/sub there)")
    app, console = Store(connect(redis_url, 5.0)), Store(connect(redis_url, 5.0))
    lottery = Room("lot", paths=["/lot*"], rate=1, method="random")
    try:
        app.invalidations.start()
        deadline = time.monotonic() + 5
        while not app.invalidations.live:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await app.stats(lottery)
        first = await console.seed("lot")
        assert first is not None
        heard = app.invalidations.heard("lot")
        assert await console.forget("lot") == (0, 0, 0)
        while app.invalidations.heard("lot") == heard:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await app.stats(lottery)
        again = await console.seed("lot")
        assert again is not None
        assert again != first
    finally:
        await app.aclose()
        await console.aclose()


async def test_forgetting_a_room_nobody_made_is_an_unknown_room(store: Store) -> None:
    with pytest.raises(UnknownRoom, match="no room named 'nope'"):
        await store.forget("nope")
    assert await keys_of(store, "nope") == []
