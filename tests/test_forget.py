"""Forgetting a room left behind (renamed, a test): every key of it goes,
never while anybody is in it, and a room whose code still runs comes back
whole."""

from __future__ import annotations

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


@pytest.mark.parametrize("how", ["forgotten", "data lost", "scheduled opening"])
async def test_a_room_made_again_draws_from_a_new_seed_never_the_empty_one(redis_url: str, how: str) -> None:
    """An app process offers a room its seed until a call stores it, then
    never again: a room forgotten or whose data Redis lost came back from
    the app's next call with no seed, and its lottery (or its pre-queue's
    shuffle) drew from the empty one, which anyone can compute. A room
    that draws and has no seed now refuses a call that offers none
    (advance.lua), and the process calls again with an offer: whether or
    not it heard of the loss (no subscription here, as in a cluster, or
    with local_admissions=False)."""
    app = Store(connect(redis_url, 5.0), local_admissions=False)
    console = Store(connect(redis_url, 5.0))
    room = Room("lot", paths=["/lot*"], rate=1, method="random")
    if how == "scheduled opening":
        room = Room("lot", paths=["/lot*"], rate=1, opens_at="2030-01-01T00:00:00Z")
    try:
        await app.stats(room)
        first = await console.seed("lot")
        assert first is not None
        if how == "data lost":
            await app.client.delete(*(await keys_of(app, "lot")))
        else:
            assert await console.forget("lot") == (0, 0, 0)
        assert "lot" in app.calls._seeded  # it saw the seed stored: it offers none now
        await app.stats(room)
        again = await console.seed("lot")
        assert again is not None
        assert again != first
    finally:
        await app.aclose()
        await console.aclose()


async def test_a_room_switched_to_a_lottery_after_losing_its_seed_gets_one_written_once(
    redis_url: str,
) -> None:
    """A process that saw a first-come room's seed offers none; its data lost
    and made again without one (it draws nothing), the room is switched to
    a lottery. configure.lua refuses such a change before writing anything
    (it wrote the change, then advance() refused it, and the call again
    wrote it twice), and the process calls again with a seed."""
    app = Store(connect(redis_url, 5.0), local_admissions=False)
    room = Room("lot", paths=["/lot*"], rate=1)
    try:
        await app.stats(room)
        await app.client.delete(*(await keys_of(app, "lot")))
        await app.stats(room)  # made again: no seed, none needed yet
        assert await app.seed("lot") is None
        published = []
        async with app.client.pubsub() as listener:
            await listener.subscribe("qg:{lot}:revoked")
            await listener.get_message(timeout=1.0)  # the subscription's own
            await app.configure("lot", method="random", who="ada")
            while (message := await listener.get_message(timeout=0.5)) is not None:
                published.append(message["data"])
        assert len(published) == 1, published  # the change was made once
        assert (await app.stats("lot"))["method"] == "random"
        assert await app.seed("lot") is not None
        assert [entry["details"] for entry in await app.activity("lot")] == [{"method": "random"}]
        raw = await app.client.hget("qg:{lot}:state", "method")
        assert raw in (b"random", "random")
    finally:
        await app.aclose()


async def test_forgetting_a_room_nobody_made_is_an_unknown_room(store: Store) -> None:
    with pytest.raises(UnknownRoom, match="no room named 'nope'"):
        await store.forget("nope")
    assert await keys_of(store, "nope") == []
