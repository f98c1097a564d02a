"""Far-back polls (queuegate.farback, view.lua, checkin.lua): answered from a
view of the line, within 1 % of the true rank, with liveness recorded in
batches so that silent visitors are still skipped at the front and live ones
never are. The model test (test_model.py) checks that a far-back answer is
the full call's answer when the view is as fresh as the question."""

from __future__ import annotations

import asyncio
import random

import pytest

from queuegate import Room, Store
from queuegate.farback import View
from queuegate.outcomes import PAUSED_ETA, Outcome, waiting
from queuegate.store import connect

from .conftest import MakeGate, client_for

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
JSON = {"accept": "application/json"}


def test_a_place_between_two_samples_gets_a_rank_between_theirs() -> None:
    # Ranks 100, 110, 111; arrival numbers with gaps (people who left).
    samples = [100, 1000, 50_000, 2000, 110, 1030, 55_000, 2000, 111, 1031, 55_500, 1000]
    view = View.parse([T0, 200, 100, 5000, 0, *samples])
    assert view.spot(1000) == (100, 50_000, 2000)  # a sample itself
    rank, eta, poll = view.spot(1015)  # type: ignore[misc]
    assert 100 < rank < 110
    assert 50_000 < eta < 55_000
    assert poll == 2000
    assert view.spot(999) is None  # nearer the front than the view reaches
    assert view.spot(1032) is None  # newer than the view
    # Both neighbours are samples at adjacent ranks: nobody between them.
    assert view.spot(1030) == (110, 55_000, 2000)
    gap = View.parse([T0, 10, 0, 0, 0, 0, 7, 100, 1000, 1, 9, 200, 1000])
    assert gap.spot(8) is None  # left the line
    unknown = View.parse([T0, 10, 0, 0, 0, 0, 7, -1, 1000, 5, 20, 200, 1000])
    assert unknown.spot(10) == (1, -1, 1000)  # no estimate at one end: none between


async def _place(store: Store, room: Room, visitor: str) -> int:
    score = await store.client.zscore(store.keys(room.name)[1], visitor)
    assert score is not None
    return int(score)


async def _rank(store: Store, room: Room, visitor: str) -> int:
    rank = await store.client.zrank(store.keys(room.name)[1], visitor)
    assert isinstance(rank, int)
    return rank


async def _fill(store: Store, room: Room, count: int, now: int | None) -> list[str]:
    # 200 calls at a time: a gate's store gives each call 0.25 s, and on a
    # slow, busy machine the last of 2,000 sent at once waited longer.
    visitors = [f"w{i:06d}" for i in range(count)]
    for first in range(0, count, 200):
        await store.enter_many(room, visitors[first : first + 200], now=now)
    return visitors


async def test_far_back_ranks_are_within_one_percent_of_the_true_rank(store: Store) -> None:
    room = Room("far", paths=["/x"], rate=5, per=1.0, abandon=300.0, client_limit=0)
    visitors = await _fill(store, room, 12_000, T0)
    first = await store.enter(room, visitors[0], now=T0)
    assert first.state == "active"
    # People leave from everywhere (gaps in the arrival numbers), most of
    # them from one stretch: the worst case for interpolating between samples.
    rng = random.Random(7)
    leaving = set(rng.sample(visitors[1000:], 800)) | set(visitors[6000:6400])
    await asyncio.gather(*(store.leave(room, v, now=T0) for v in leaving))
    now = T0 + 1
    checked = near = 0
    for visitor in rng.sample([v for v in visitors[10:] if v not in leaving], 1500):
        place = await _place(store, room, visitor)
        true_rank = await _rank(store, room, visitor)
        outcome = await store.enter(room, visitor, place=place, seen_ms=now, now=now)
        assert outcome.state == "waiting"
        assert outcome.place == place
        exact = await store.enter(room, visitor, now=now)
        assert exact.rank == true_rank
        if true_rank >= 1000:
            assert abs(outcome.rank - true_rank) <= 0.01 * true_rank, (outcome.rank, true_rank)
            assert outcome.line == exact.line
            checked += 1
        else:
            # Near the front: the exact rank, asked of Redis; the estimate
            # and poll interval the full call gives for it (every rank up to
            # 200 is a sample; past it, between those of two samples 0.5 %
            # apart: within 0.5 % and one refill of this room's, 1 s).
            assert outcome.rank == true_rank
            assert abs(outcome.eta_ms - exact.eta_ms) <= 0.005 * exact.eta_ms + 1000, (outcome, exact)
            assert outcome.poll_ms <= exact.poll_ms
            assert outcome.eta_ms == exact.eta_ms or true_rank > 200
            near += 1
    assert checked > 1000
    assert near > 50
    assert store.far_back.answered == checked + near
    assert store.far_back.front_answered == near


async def test_a_far_back_poll_in_a_paused_room_says_it_is_paused(store: Store) -> None:
    """The view's estimates say a paused room as the full call does, and a
    rank between two samples keeps it (it read as "unknown for now")."""
    room = Room("far", paths=["/x"], rate=5, per=1.0, abandon=300.0, client_limit=0)
    visitors = await _fill(store, room, 6000, T0)
    await store.configure(room.name, status="paused", now=T0)
    far = visitors[-7]  # between two samples
    said = await store.enter(room, far, place=await _place(store, room, far), seen_ms=T0, now=T0 + 1)
    assert store.far_back.answered == 1
    assert (said.state, said.eta_ms) == ("waiting", PAUSED_ETA)
    near = await store.enter(room, visitors[100], now=T0 + 2)
    assert (near.state, near.eta_ms) == ("waiting", PAUSED_ETA)


async def test_a_view_built_before_this_process_changes_the_room_is_not_used_after(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view whose build was under way when this process paused the room,
    then opened it again, came back after the change and was kept: the
    polls near the front were told the line was paused after it had opened
    (test_gate's paused line, once in a loaded CI)."""
    room = Room("sale", paths=["/x"], rate=1, per=3600.0, client_limit=0)
    await store.enter(room, "first")  # the bucket's one token
    joined = await store.enter(room, "second")
    await store.configure(room, status="paused")
    build, built, release = store.far_back._build, asyncio.Event(), asyncio.Event()

    async def late(room: Room, now: int | None) -> View:
        view = await build(room, now)
        built.set()
        await release.wait()  # its reply is late
        return view

    monkeypatch.setattr(store.far_back, "_build", late)

    async def poll() -> Outcome:
        return await store.enter(room, "second", place=joined.place, seen_ms=joined.seen_ms)

    assert (await poll()).eta_ms == PAUSED_ETA  # no view yet: the full call, and a view is built
    await asyncio.wait_for(built.wait(), 5.0)  # under the pause
    await store.configure(room, status="open")
    # Its reply comes after the change is heard on the subscription (which
    # drops the room's view) too: without one, as in a cluster, at once.
    await asyncio.sleep(0.2)
    release.set()
    await asyncio.sleep(0.05)
    polls = [await poll() for _ in range(3)]  # the full call settles the room: then the front path
    assert [said.eta_ms == PAUSED_ETA for said in polls] == [False] * 3


async def test_far_back_answers_in_real_time_from_one_shared_view(redis_url: str) -> None:
    room = Room("live", paths=["/x"], rate=5, per=1.0, abandon=300.0, client_limit=0)
    stores = [Store(connect(redis_url, 5.0)) for _ in range(2)]
    try:
        visitors = await _fill(stores[0], room, 6000, None)
        far = visitors[-1]
        place = await _place(stores[0], room, far)
        seen = stores[0].redis_now_ms()
        # The first question finds no view yet (a call builds it meanwhile).
        first = [await store.enter(room, far, place=place, seen_ms=seen) for store in stores]
        assert [store.far_back.answered for store in stores] == [0, 0]
        assert [o.rank for o in first] == [await _rank(stores[0], room, far)] * 2
        await asyncio.sleep(0.05)
        # Built once and shared: the second process got the stored view.
        views = [store.far_back._views[room.name] for store in stores]
        assert views[0].at_ms == views[1].at_ms
        for store in stores:
            answers = [await store.enter(room, far, place=place, seen_ms=seen) for _ in range(20)]
            true_rank = await _rank(store, room, far)
            assert store.far_back.answered == 20
            assert all(abs(a.rank - true_rank) <= 0.01 * true_rank for a in answers)
    finally:
        for store in stores:
            await store.aclose()


async def test_live_far_back_visitors_are_admitted_and_silent_ones_skipped(redis_url: str) -> None:
    # Every rank from 50 on is far back. One visitor in two stops polling
    # after joining; the others poll every 10 s with their cookie's place.
    store = Store(connect(redis_url, 5.0), far_from=50)
    try:
        room = Room("skips", paths=["/x"], rate=1, per=2.0, abandon=120.0, client_limit=0)
        visitors = await _fill(store, room, 150, T0)
        cookies: dict[str, tuple[int, int]] = {}
        for v in visitors:
            first = await store.enter(room, v, now=T0)
            if first.state == "waiting":
                cookies[v] = (first.place, first.seen_ms)
        silent = {v for i, v in enumerate(visitors) if i % 2 and i >= 50}
        admitted: list[str] = []
        now = T0
        while cookies.keys() - silent and now < T0 + 600_000:
            # The room's ticker moves the line at each refill between polls.
            for refill in range(now + 2000, now + 10_000, 2000):
                await store.tick(room, "ticker", 2000, now=refill)
            now += 10_000
            for v in sorted(cookies.keys() - silent):
                place, seen = cookies[v]
                outcome = await store.enter(room, v, place=place, seen_ms=seen, now=now)
                if outcome.state == "active":
                    admitted.append(v)
                    del cookies[v]
                else:
                    assert outcome.state == "waiting"
                    assert outcome.place == place
                    cookies[v] = (place, outcome.seen_ms)
        live = [v for v in visitors[1:] if v not in silent]
        assert admitted == live  # every live visitor, in arrival order
        assert store.far_back.answered > 100
        assert 0 < store.far_back.checked_in < store.far_back.answered  # recorded, but not every poll
        stats = await store.stats(room, now=now)
        assert stats["waiting"] == 0
        # Silent ones reaching the front within `abandon` of joining were
        # admitted (rightly); all the others were skipped.
        ever_active = set((await store.visitors(room, 1000))["active"]) | set(admitted)
        taken = sorted(v for v in silent if v in {a[0] if isinstance(a, tuple) else a for a in ever_active})
        assert taken == sorted(silent)[: len(taken)]
        assert len(taken) < 10
        assert stats["abandoned"] == len(silent) - len(taken)
    finally:
        await store.aclose()


@pytest.mark.parametrize("checked_in", [False, True])
async def test_a_removed_visitor_is_found_out_at_their_next_check_in(store: Store, checked_in: bool) -> None:
    room = Room("gone", paths=["/x"], rate=1, per=60.0, abandon=300.0, client_limit=0)
    visitors = await _fill(store, room, 3000, T0)
    target = visitors[2500]
    joined = await store.enter(room, target, now=T0 + 1)
    assert joined.state == "waiting"
    if checked_in:  # their liveness is in the check-in hash (liveness.lua)
        await store.enter(room, target, place=joined.place, now=T0 + 1)
        assert store.far_back.checked_in == 1
    assert await store.leave(room, target, now=T0 + 2)  # an operator removes them
    # Their liveness was recorded just now (their cookie says): the view answers.
    answered = store.far_back.answered
    early = await store.enter(room, target, place=joined.place, seen_ms=T0 + 3, now=T0 + 3)
    assert store.far_back.answered == answered + 1
    assert early.place == joined.place
    # A check-in is due: it finds them gone, and the full call answers (the back).
    late = T0 + 200_000
    again = await store.enter(room, target, place=joined.place, seen_ms=T0 + 3, now=late)
    assert store.far_back.answered == answered + 1
    assert again.state == "waiting"
    assert again.joined
    assert again.place > joined.place


async def test_the_cookie_carries_the_place_and_a_far_poll_asks_no_full_call(make_gate: MakeGate) -> None:
    room = Room("sale", paths=["/checkout*"], rate=1, per=60.0, abandon=300.0)
    gate = await make_gate(rooms=[room])
    await _fill(gate.store, room, 1500, gate.store.redis_now_ms())
    async with client_for(gate) as client:
        first = await client.get("/checkout", headers={"accept": "application/json"})
        assert first.status_code == 503
        position = first.json()["position"]
        payload = first.cookies["qg_sale"].split(".")[0].split("~")
        visitor, place, seen = payload[0], int(payload[4]), int(payload[5])
        assert place >= 1500
        assert seen > 0
        await client.get("/checkout", headers={"accept": "application/json"})  # builds the view
        await asyncio.sleep(0.2)
        calls = await gate.store.client.info("commandstats")
        before = calls.get("cmdstat_evalsha", {}).get("calls", 0)
        polls = [await client.get("/checkout", headers={"accept": "application/json"}) for _ in range(10)]
        calls = await gate.store.client.info("commandstats")
        after = calls.get("cmdstat_evalsha", {}).get("calls", 0)
    assert gate.store.far_back.answered == 10
    assert after - before <= 1  # no call per poll (a view may be rebuilt once)
    assert all(p.status_code == 503 and p.json()["position"] == position for p in polls)
    assert visitor == first.cookies["qg_sale"].split(".")[0].split("~")[0]


async def test_the_pages_polls_near_the_front_ask_no_script(make_gate: MakeGate) -> None:
    # What the waiting page polls: the status endpoint, with the cookie the
    # gated page set. At the front, each poll asks Redis the exact rank with
    # plain commands (no script call) while the room is settled; once the
    # visitor is let in, the full call says so.
    # (The polls must all come before the next refill: at 1 per 2 s, a
    # loaded CI run's polls outlasted the window and half went to the full
    # call once the room moved; 10 s leaves room.)
    room = Room("sale", paths=["/checkout*"], rate=1, per=10.0, abandon=300.0)
    gate = await make_gate(rooms=[room])
    await gate.store.enter(room, "first")  # takes the bucket's one token
    await gate.store.enter(room, "second")
    async with client_for(gate) as client:
        joined = await client.get("/checkout", headers=JSON)
        assert joined.json()["position"] == 2
        await client.get("/_queuegate/status/sale")  # a view is built meanwhile
        await asyncio.sleep(0.05)
        calls = await gate.store.client.info("commandstats")
        before = calls.get("cmdstat_evalsha", {}).get("calls", 0)
        polls = [await client.get("/_queuegate/status/sale") for _ in range(10)]
        calls = await gate.store.client.info("commandstats")
        after = calls.get("cmdstat_evalsha", {}).get("calls", 0)
        assert gate.store.far_back.front_answered == 10
        assert after - before <= 1  # no call per poll (a view may be rebuilt once)
        assert [p.json()["position"] for p in polls] == [2] * 10
        await gate.store.leave(room, "second")
        assert (await client.get("/_queuegate/status/sale")).json()["position"] == 1  # exact, at once
        # The next refill lets this visitor in (within 10 s of "first").
        for _ in range(150):
            answer = (await client.get("/_queuegate/status/sale")).json()
            if answer["state"] != "waiting":
                break
            await asyncio.sleep(0.1)
        assert answer["state"] == "active"


@pytest.mark.parametrize("method", ["random"])
async def test_a_lottery_has_no_far_path(store: Store, method: str) -> None:
    room = Room("draw", paths=["/x"], rate=1, per=60.0, method=method, client_limit=0)
    visitors = await _fill(store, room, 1500, T0)
    outcome = await store.enter(room, visitors[-1], now=T0)
    again = await store.enter(room, visitors[-1], place=outcome.place, seen_ms=T0, now=T0)
    assert store.far_back.answered == 0
    assert again.rank == outcome.rank


async def test_check_ins_count_as_polls_in_full_do(redis_url: str) -> None:
    # Two rooms of the same shape, the same visitors, the same moments: in
    # one, waiting visitors poll with their cookie's place (every rank far
    # back, every view as fresh as the question: liveness goes to the
    # check-in hash), in the other in full (liveness in `seen`). Some stop
    # polling. The line, the skips of the silent at the front and the
    # estimates (which count the quiet) must come out the same. (Each far
    # poll checks in: its cookie says liveness was never recorded. The
    # polls come at random moments, not at the page's interval, which is
    # what lets the gate record it less often.)
    far = Store(connect(redis_url, 5.0), far_from=0)
    full = Store(connect(redis_url, 5.0))
    try:
        rooms = [
            Room(name, paths=["/x"], rate=1, per=4.0, abandon=16.5, client_limit=0, session=600.0)
            for name in ("far-liveness", "full-liveness")
        ]
        rng = random.Random(3)
        visitors = [f"v{i:02d}" for i in range(14)]
        stops_at = {v: T0 + rng.choice([5_000, 20_000, 45_000, 10**9]) for v in visitors}
        cookies: dict[str, int] = {}
        in_hash: list[int] = []  # far-back visitors' liveness in liveness.lua's hash, after each step
        now = T0
        for v in visitors:
            await full.enter(rooms[1], v, now=now)
            first = await far.enter(rooms[0], v, now=now)
            if first.state == "waiting":
                cookies[v] = first.place
        for _ in range(40):
            # Whole seconds, and a third of `abandon` is not: the check-in
            # hash counts the quiet to the second (the seconds that began
            # by the threshold), `seen` to the millisecond.
            now += rng.choice([1_000, 2_000, 3_000, 4_000])
            for v in visitors:
                if now >= stops_at[v] or rng.random() < 0.2:
                    continue
                place = cookies.get(v, 0)
                a = await far.enter(rooms[0], v, place=place, now=now)
                b = await full.enter(rooms[1], v, now=now)
                assert (a.state, a.rank, a.line) == (b.state, b.rank, b.line), (v, now)
                if a.state == "waiting":
                    cookies[v] = a.place
                    # Asked again at once, after this poll's liveness is in.
                    again = await far.enter(rooms[0], v, place=a.place, now=now)
                    assert (again.rank, again.eta_ms, again.poll_ms) == (b.rank, b.eta_ms, b.poll_ms)
            # Both brought up to date (a far poll of an admitted visitor with
            # an old place builds a view, and so moves the line, where a
            # poll in full of that visitor need not).
            both = ((far, rooms[0]), (full, rooms[1]))
            admitted = [(await store.stats(room, now=now))["admitted"] for store, room in both]
            assert admitted[0] == admitted[1]
            lines = [await store.visitors(room, 100) for store, room in both]
            in_hash.append(await far.client.hlen(far.keys(rooms[0].name)[4][: -len("state")] + "alive"))
            assert [v for v, _ in lines[0]["waiting"]] == [v for v, _ in lines[1]["waiting"]]
            assert {v for v, _ in lines[0]["active"]} == {v for v, _ in lines[1]["active"]}
        stats = [await far.stats(rooms[0], now=now), await full.stats(rooms[1], now=now)]
        assert stats[0]["abandoned"] == stats[1]["abandoned"] > 0
        assert far.far_back.checked_in > 50
        assert max(in_hash) > 0  # far-back liveness was in the hash, not in `seen`
        if stats[0]["waiting"] == 0:
            assert in_hash[-1] == 0  # and left it with its visitor
    finally:
        await far.aclose()
        await full.aclose()


async def test_the_gate_answers_far_back_unless_told_not_to(make_gate: MakeGate) -> None:
    room = Room("sale", paths=["/checkout*"], rate=1, per=60.0, abandon=300.0)
    for far_back, answered in ((True, 5), (False, 0)):
        gate = await make_gate(rooms=[room], far_back=far_back, prefix=f"far{far_back}")
        await _fill(gate.store, room, 1500, gate.store.redis_now_ms())
        async with client_for(gate) as client:
            await client.get("/checkout", headers=JSON)  # joins at the back
            await client.get("/checkout", headers=JSON)  # a view is built meanwhile
            await asyncio.sleep(0.05)
            for _ in range(5):
                assert (await client.get("/checkout", headers=JSON)).json()["state"] == "waiting"
        assert gate.store.far_back.answered == answered


def test_the_setting_is_read_and_checked() -> None:
    from queuegate import ConfigError
    from queuegate.options import Settings

    secret = "x" * 32
    assert not Settings.load({"QUEUEGATE_FAR_BACK": "off"}, secret_key=secret).far_back
    assert Settings.load({}, secret_key=secret).far_back
    with pytest.raises(ConfigError, match="QUEUEGATE_FAR_BACK"):
        Settings.load({"QUEUEGATE_FAR_BACK": "maybe"}, secret_key=secret)
    with pytest.raises(ConfigError, match="far_back"):
        Settings.load({}, secret_key=secret, far_back="yes")


async def test_a_front_answer_stops_short_of_the_snapshots_end(store: Store) -> None:
    # This process's idea of Redis's time may lag a little: within 10 ms of
    # the snapshot's end, the full call answers (and moves the line).
    room = Room("edge", paths=["/x"], rate=1, per=3600.0)
    await store.enter(room, "a")
    await store.enter(room, "b")
    state = store.keys(room.name)[4]
    now = store.redis_now_ms()
    await store.client.hset(state, "quick_until", now + 5)
    assert await store.front_rank(room, "b") is None
    await store.client.hset(state, "quick_until", now + 60_000)
    assert await store.front_rank(room, "b") == 0
    assert await store.front_rank(room, "a") is None  # let in: not waiting
    assert await store.front_rank(room.name, "b") is None  # no settings to compare


def test_a_waiting_outcome_made_by_position_has_each_value_in_its_field() -> None:
    # outcomes.waiting passes Outcome's fields by position (keywords cost a
    # dict on every poll and join): a field added or moved would shift them.
    made = waiting(T0, "v1", 3, 9, 4_000, 1_500, True, "random", 42, T0 - 7)
    named = Outcome(
        "waiting",
        T0,
        "v1",
        rank=3,
        line=9,
        eta_ms=4_000,
        poll_ms=1_500,
        joined=True,
        method="random",
        place=42,
        seen_ms=T0 - 7,
    )
    assert made == named
