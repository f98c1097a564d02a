"""The rules of the line, driven straight through the Lua scripts.

Times are passed explicitly (the scripts accept a ``now`` for tests), so
intervals and expiries are exact and nothing sleeps.
"""

from __future__ import annotations

import pytest

from queuegate import Room, Store
from queuegate.outcomes import PAUSED_ETA

from .conftest import ALL_KINDS

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000  # ms


def rate_room(rate: int = 3, per: float = 1.0, **kw: object) -> Room:
    return Room("sale", paths=["/checkout*"], rate=rate, per=per, **kw)  # type: ignore[arg-type]


async def test_bucket_admits_rate_at_once_then_queues(store: Store) -> None:
    room = rate_room(rate=3)
    states = [(await store.enter(room, f"v{i}", now=T0)).state for i in range(5)]
    assert states == ["active", "active", "active", "waiting", "waiting"]
    second = await store.enter(room, "v4", now=T0 + 1)
    assert (second.rank, second.line) == (1, 2)


async def test_line_moves_one_batch_per_whole_interval(store: Store) -> None:
    room = rate_room(rate=2, per=1.0)
    for i in range(8):
        await store.enter(room, f"v{i}", now=T0)
    # 2 in at once, 6 waiting: 2 more at each whole second, none before.
    assert (await store.enter(room, "v2", now=T0 + 999)).state == "waiting"
    assert (await store.enter(room, "v2", now=T0 + 1000)).state == "active"
    assert (await store.enter(room, "v3", now=T0 + 1000)).state == "active"
    assert (await store.enter(room, "v4", now=T0 + 1500)).rank == 0
    # Three intervals with nobody asking: the bucket still holds only 2, so
    # the app never gets more than 2 in one interval, whatever the silence.
    outcomes = [await store.enter(room, f"v{i}", now=T0 + 4000) for i in range(4, 8)]
    assert [o.state for o in outcomes] == ["active", "active", "waiting", "waiting"]
    assert [o.rank for o in outcomes[2:]] == [0, 1]


async def test_bucket_never_holds_more_than_rate(store: Store) -> None:
    room = rate_room(rate=3, per=1.0, session=7200.0)
    await store.enter(room, "first", now=T0)
    # A long quiet spell must not bank more than 3 tokens.
    for i in range(10):
        await store.enter(room, f"late{i}", now=T0 + 3_600_000)
    stats = await store.stats(room, now=T0 + 3_600_000)
    assert stats["active"] == 4  # first + 3
    assert stats["waiting"] == 7
    assert stats["tokens"] == 0


async def test_fifo_by_arrival_and_reload_keeps_place(store: Store) -> None:
    room = rate_room(rate=1, per=10.0)
    await store.enter(room, "in", now=T0)
    for i in range(5):
        await store.enter(room, f"w{i}", now=T0 + i)
    again = await store.enter(room, "w3", now=T0 + 100)
    assert (again.rank, again.line, again.joined) == (3, 5, False)
    admitted = []
    for step in range(1, 6):
        now = T0 + step * 10_000
        for i in range(5):
            if f"w{i}" not in admitted and (await store.enter(room, f"w{i}", now=now)).state == "active":
                admitted.append(f"w{i}")
    assert admitted == ["w0", "w1", "w2", "w3", "w4"]


async def test_expired_session_goes_to_the_back(store: Store) -> None:
    room = rate_room(rate=1, per=1.0, session=5.0)
    first = await store.enter(room, "a", now=T0)
    assert (first.state, first.expires_ms) == ("active", T0 + 5000)
    await store.enter(room, "b", now=T0)
    assert (await store.enter(room, "a", now=T0 + 4999)).state == "active"
    # b was admitted at T0+1000; at T0+5000 a's session is over.
    late = await store.enter(room, "a", now=T0 + 5000)
    assert late.joined
    await store.enter(room, "c", now=T0 + 5000)
    c = await store.enter(room, "c", now=T0 + 5001)
    assert c.state == "waiting"


async def test_sliding_session_is_renewed_fixed_is_not(store: Store) -> None:
    sliding = Room("s", paths=["/s"], capacity=5, session=10.0, sliding=True)
    fixed = Room("f", paths=["/f"], capacity=5, session=10.0)
    for room in (sliding, fixed):
        await store.enter(room, "v", now=T0)
        renewed = await store.enter(room, "v", now=T0 + 8000)
        assert renewed.state == "active"
    assert (await store.enter(sliding, "v", now=T0 + 16_000)).state == "active"
    assert (await store.enter(fixed, "v", now=T0 + 16_000)).joined


async def test_capacity_release_admits_next_at_once(store: Store) -> None:
    room = Room("cap", paths=["/c"], capacity=2)
    for name in "abcd":
        await store.enter(room, name, now=T0)
    assert (await store.stats(room, now=T0))["active"] == 2
    assert await store.release(room, "a", now=T0 + 1)
    assert (await store.enter(room, "c", now=T0 + 2)).state == "active"
    assert (await store.enter(room, "d", now=T0 + 2)).rank == 0
    assert not await store.release(room, "a", now=T0 + 3)  # released already
    stats = await store.stats(room, now=T0 + 3)
    assert (stats["active"], stats["released"]) == (2, 1)


async def test_a_release_ends_an_admission_and_leaves_one_in_line_there(store: Store) -> None:
    """A release is the app's (or an operator's) word that the protected
    action is done: of one still in line it took the place and counted
    them as released. In a passthrough room, where one in line is let
    through and released by the app when done, it still takes the place."""
    room = rate_room(rate=1, per=3600.0, abandon=0)
    for name in "ab":
        await store.enter(room, name, now=T0)
    assert not await store.release(room, "b", now=T0 + 1)
    stats = await store.stats(room, now=T0 + 1)
    assert (stats["waiting"], stats["released"]) == (1, 0)
    assert (await store.enter(room, "b", now=T0 + 2)).rank == 0  # still there
    await store.configure(room, status="passthrough", now=T0 + 3)
    assert (await store.enter(room, "b", now=T0 + 4)).state == "pass"
    assert await store.release(room, "b", now=T0 + 5)
    await store.configure(room, status="open", now=T0 + 6)
    stats = await store.stats(room, now=T0 + 6)
    assert (stats["waiting"], stats["released"]) == (0, 1)


async def test_leave_then_return_is_the_back(store: Store) -> None:
    room = rate_room(rate=1, per=60.0)
    for name in ("in", "a", "b", "c"):
        await store.enter(room, name, now=T0)
    assert await store.leave(room, "a", now=T0 + 1)
    back = await store.enter(room, "a", now=T0 + 2)
    assert (back.rank, back.joined) == (2, True)
    assert (await store.enter(room, "b", now=T0 + 3)).rank == 0


async def test_abandoned_visitor_is_skipped_and_slot_goes_to_next(store: Store) -> None:
    room = rate_room(rate=1, per=40.0, abandon=30.0)
    await store.enter(room, "in", now=T0)
    await store.enter(room, "gone", now=T0)
    await store.enter(room, "here", now=T0)
    # "here" keeps polling, "gone" never polls again; the next turn is at 40 s.
    for t in range(5_000, 45_000, 5_000):
        await store.enter(room, "here", now=T0 + t)
    at_turn = await store.enter(room, "here", now=T0 + 40_000)
    assert at_turn.state == "active"
    assert (await store.enter(room, "gone", now=T0 + 40_001, join=False)).state == "none"
    stats = await store.stats(room, now=T0 + 40_001)
    assert (stats["abandoned"], stats["admitted"]) == (1, 2)


async def test_eta_counts_whole_intervals_to_the_visitors_turn(store: Store) -> None:
    room = rate_room(rate=10, per=5.0)
    for i in range(10):
        await store.enter(room, f"in{i}", now=T0)
    outcomes = [await store.enter(room, f"w{i}", now=T0 + 1000) for i in range(25)]
    # Refill at T0+5000 takes w0..w9, T0+10000 w10..w19, T0+15000 the rest.
    assert [o.eta_ms for o in outcomes[:10]] == [4000] * 10
    assert outcomes[10].eta_ms == 9000
    assert outcomes[24].eta_ms == 14000
    assert all(1000 <= o.poll_ms <= 20_000 for o in outcomes)


async def test_eta_of_capacity_room_is_bounded_by_fixed_sessions(store: Store) -> None:
    room = Room("cap", paths=["/c"], capacity=2, session=60.0)
    for name in "abcde":
        await store.enter(room, name, now=T0)
    e = await store.enter(room, "e", now=T0)
    # Nothing measured yet: two rounds of fixed sessions at most.
    assert (e.rank, e.eta_ms) == (2, 120_000)
    sliding = Room("slide", paths=["/s"], capacity=1, session=60.0, sliding=True)
    await store.enter(sliding, "a", now=T0)
    assert (await store.enter(sliding, "b", now=T0)).eta_ms == -1


async def test_settings_changed_at_run_time_apply_to_the_next_call(store: Store) -> None:
    room = rate_room(rate=1, per=10.0)
    for i in range(6):
        await store.enter(room, f"v{i}", now=T0)
    await store.configure(room, rate=5, now=T0 + 1)
    # The current interval keeps its spent bucket; the next refill is 5.
    assert (await store.enter(room, "v1", now=T0 + 2)).state == "waiting"
    states = [(await store.enter(room, f"v{i}", now=T0 + 10_000)).state for i in range(1, 6)]
    assert states == ["active"] * 5
    await store.configure(room, rate=None, now=T0 + 10_001)
    assert (await store.stats(room, now=T0 + 10_001))["rate"] == 1


async def test_configure_rejects_bad_values_and_changes_nothing(store: Store) -> None:
    from queuegate import ConfigError

    room = rate_room(rate=3)
    with pytest.raises(ConfigError, match="rate"):
        await store.configure(room, capacity=5, rate=-1)
    with pytest.raises(ConfigError, match="status"):
        await store.configure(room, status="half-open")
    with pytest.raises(ConfigError, match="unknown"):
        await store.configure(room, speed=3)
    stats = await store.stats(room, now=T0)
    assert (stats["rate"], stats["capacity"], stats["status"]) == (3, 0, "open")


async def test_paused_admits_nobody_and_resume_moves_the_line(store: Store) -> None:
    room = rate_room(rate=5)
    await store.configure(room, status="paused", now=T0)
    outcomes = [await store.enter(room, f"v{i}", now=T0 + 10_000) for i in range(3)]
    assert [o.state for o in outcomes] == ["waiting"] * 3
    assert outcomes[0].eta_ms == PAUSED_ETA  # the page says the line is paused
    await store.configure(room, status="open", now=T0 + 10_001)
    assert (await store.enter(room, "v2", now=T0 + 10_002)).state == "active"


async def test_closed_refuses_newcomers_passthrough_lets_all_in(store: Store) -> None:
    room = rate_room(rate=1, per=60.0)
    await store.enter(room, "in", now=T0)
    await store.enter(room, "waiter", now=T0)
    await store.configure(room, status="closed", now=T0 + 1)
    assert (await store.enter(room, "new", now=T0 + 2)).state == "closed"
    assert (await store.enter(room, "waiter", now=T0 + 2)).state == "closed"
    assert (await store.enter(room, "in", now=T0 + 2)).state == "active"
    await store.configure(room, status="passthrough", now=T0 + 3)
    assert (await store.enter(room, "new", now=T0 + 4)).state == "pass"
    await store.configure(room, status="open", now=T0 + 5)
    assert (await store.enter(room, "waiter", now=T0 + 6)).rank == 0


async def test_queue_all_sends_everybody_through_the_line(store: Store) -> None:
    room = rate_room(rate=5)
    await store.configure(room, status="queue_all", now=T0)
    first = await store.enter(room, "a", now=T0 + 1)
    assert first.state == "waiting"  # even with 5 tokens free
    assert (await store.enter(room, "a", now=T0 + 2)).state == "active"


async def test_one_call_moves_at_most_max_step_visitors(store: Store) -> None:
    room = Room("big", paths=["/b"], capacity=100, max_step=10)
    await store.configure(room, status="paused", now=T0)
    for i in range(50):
        await store.enter(room, f"v{i}", now=T0)
    await store.configure(room, status="open", now=T0 + 1)
    # configure moves the room under its new settings: the first 10; each
    # later call moves 10 more.
    got = await store.visitors(room, count=100)
    assert (len(got["active"]), len(got["waiting"])) == (10, 40)
    stats = await store.stats(room, now=T0 + 2)
    assert (stats["active"], stats["waiting"]) == (20, 30)
    stats = await store.stats(room, now=T0 + 3)
    assert (stats["active"], stats["waiting"]) == (30, 20)


async def test_rooms_do_not_share_state(store: Store) -> None:
    a, b = rate_room(rate=1), Room("other", paths=["/o"], rate=1, per=1.0)
    await store.enter(a, "v", now=T0)
    assert (await store.enter(b, "w", now=T0)).state == "active"
    assert all(key.startswith("qg:{sale}:") for key in store.keys("sale"))


async def test_eta_counts_only_visitors_still_polling(store: Store) -> None:
    room = rate_room(rate=1, per=10.0, abandon=30.0)
    await store.enter(room, "in", now=T0)
    for i in range(10):
        await store.enter(room, f"w{i}", now=T0)
    # w0..w4 go silent; w5..w9 keep polling. 15 s later, w9 has 4 live people ahead.
    for i in range(5, 10):
        await store.enter(room, f"w{i}", now=T0 + 12_000)
    late = await store.enter(room, "w9", now=T0 + 12_000)
    assert late.rank == 8  # w0 went in at the refill; everyone keeps their place...
    assert late.eta_ms <= 5 * 10_000  # ...but the estimate counts the 4 live ones ahead


async def test_drain_empties_the_line_only(store: Store) -> None:
    room = rate_room(rate=1, per=60.0)
    for name in ("in", "a", "b"):
        await store.enter(room, name, now=T0)
    assert await store.drain(room, now=T0 + 1) == 2
    stats = await store.stats(room, now=T0 + 2)
    assert (stats["waiting"], stats["active"], stats["drained"]) == (0, 1, 2)


def test_the_settings_python_packs_and_logs_are_the_ones_advance_reads() -> None:
    """A room's defaults are packed in ROOM_SETTINGS' order and read by
    advance.lua's SETTINGS; `--reset all` resets SETTINGS in the script and
    the activity log names ROOM_SETTINGS: one list, written twice, held
    equal here."""
    import re
    from pathlib import Path

    from queuegate.settings import ROOM_SETTINGS

    text = (Path(__file__).parent.parent / "queuegate/scripts/advance.lua").read_text()
    found = re.search(r"local SETTINGS = \{(.*?)\}", text, re.S)
    assert found is not None
    assert tuple(re.findall(r"'(\w+)'", found.group(1))) == ROOM_SETTINGS
