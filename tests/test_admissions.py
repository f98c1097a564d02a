"""Admissions decided in-process (queuegate/admissions.py): an admitted
visitor's next requests need no round trip, and every early end of an
admission reaches every process's copy: by its message, or by the copy being
dropped when the subscription goes (closed, or silent under a hung Redis)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer
from queuegate.invalidations import LEASE, PING_EVERY
from queuegate.store import UnknownRoom, connect
from queuegate.ticker import LEASE_MS

from .conftest import SECRET, MakeGate, client_for
from .test_deadlines import hang, resume

pytestmark = pytest.mark.anyio

ROOM = Room("sale", paths=["/checkout"], capacity=10, session=60.0)
# Event-loop scheduling on a loaded 2-core machine.
MARGIN = 0.15


async def until(condition: Callable[[], bool], seconds: float = 3.0) -> float:
    """Wait for ``condition``; the seconds it took."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < seconds, "not within the time allowed"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
async def processes(redis_url: str) -> AsyncIterator[list[Store]]:
    """Two stores on their own connections, as two app processes have."""
    stores = [Store(connect(redis_url, 5.0)) for _ in range(2)]
    yield stores
    for store in stores:
        await store.aclose()


async def admitted_and_copied(store: Store, room: Room, visitor: str) -> None:
    """Let ``visitor`` in through ``store`` once its subscription is live, so
    the answer is copied."""
    store.invalidations.start()
    await until(lambda: store.invalidations.live)
    outcome = await store.enter(room, visitor)
    assert outcome.state == "active"
    assert outcome.copyable
    assert store.admissions.admitted_until(room.name, visitor) == outcome.expires_ms


def revoked_by_name(store: Store, room: str, visitor: str) -> bool:
    """Whether ``store`` heard Redis revoke the visitor's admission by name:
    the remove's own message, at once. A tick revokes the whole room ("*"),
    and a copy also goes at its session's end or when the subscription
    lapses; those come later, or on a loaded machine first."""
    return (room, visitor) in store.admissions._revoked


async def evalsha_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_an_admitted_visitor_passes_without_asking_redis(processes: list[Store]) -> None:
    store = processes[0]
    await admitted_and_copied(store, ROOM, "v1")
    assert isinstance(store.client, aioredis.Redis)
    before, ticks = await evalsha_calls(store.client), store.ticker.ticks
    hits = store.admissions.hits
    for _ in range(50):
        outcome = await store.enter(ROOM, "v1")
        assert outcome.state == "active"
    assert store.admissions.hits - hits == 50
    # The only calls are the room's ticks (queuegate.ticker; one may be in flight).
    assert await evalsha_calls(store.client) - before <= store.ticker.ticks - ticks + 1


async def test_a_release_in_one_process_ends_the_copy_in_another(processes: list[Store]) -> None:
    one, other = processes
    full = Room("full", paths=["/f"], capacity=1, session=60.0)
    await admitted_and_copied(other, full, "v1")
    assert await one.release(full, "v1")
    await until(lambda: revoked_by_name(other, "full", "v1"), 10.0)
    assert other.admissions.admitted_until("full", "v1") is None
    # The next in line is let in; the released visitor is not any more.
    assert (await other.enter(full, "v2")).state == "active"
    assert (await other.enter(full, "v1")).state == "waiting"


async def test_leaving_and_operator_changes_end_copies(processes: list[Store]) -> None:
    one, other = processes
    await admitted_and_copied(other, ROOM, "v1")
    await admitted_and_copied(other, ROOM, "v2")
    await one.leave(ROOM, "v1")
    await until(lambda: other.admissions.admitted_until("sale", "v1") is None, 1.0)
    assert other.admissions.admitted_until("sale", "v2") is not None
    # A change of settings (here: sessions now slide) drops the whole room.
    await one.configure(ROOM, sliding=True)
    await until(lambda: other.admissions.admitted_until("sale", "v2") is None, 1.0)
    outcome = await other.enter(ROOM, "v2")
    assert outcome.state == "active"
    assert not outcome.copyable
    assert other.admissions.admitted_until("sale", "v2") is None


async def test_copies_go_when_the_rooms_data_is_lost(processes: list[Store]) -> None:
    """FLUSHALL (or a failover to an empty server) while Redis stays up:
    no process goes on passing an admission Redis no longer knows. The
    ticks find the room's new incarnation and revoke every copy: within a
    tick interval of the process holding the ticker's lease and of the
    others."""
    for i, store in enumerate(processes):
        await admitted_and_copied(store, ROOM, f"v{i}")
        assert store.ticker.rooms == {"sale"}  # nobody waits, but a copy may be used
    await asyncio.sleep(0.2)  # each has ticked the room once, and knows its incarnation
    assert isinstance(processes[0].client, aioredis.Redis)
    await processes[0].client.flushall()
    took = await until(
        lambda: all(s.admissions.admitted_until("sale", f"v{i}") is None for i, s in enumerate(processes)),
        LEASE_MS / 1000 + 1.0,
    )
    assert took < LEASE_MS / 1000 + MARGIN
    for i, store in enumerate(processes):  # Redis decides again: a new line
        assert (await store.enter(ROOM, f"v{i}")).state == "active"


async def test_a_room_that_lost_its_data_says_so_in_the_log(
    processes: list[Store], caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis that keeps nothing on disk restarts: every setting an operator
    changed (here a pause) is back to the code's, and nothing said so. Each
    process that ticks the room says so, once."""
    caplog.set_level(logging.WARNING, logger="queuegate")
    one, other = processes
    await admitted_and_copied(one, ROOM, "v1")
    await admitted_and_copied(other, ROOM, "v2")
    await one.configure(ROOM, status="paused")
    await asyncio.sleep(0.3)  # each has ticked the room since, and knows its incarnation
    assert "lost its state" not in caplog.text
    assert isinstance(one.client, aioredis.Redis)
    await one.client.flushall()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "lost its state in Redis" in r.getMessage()]

    await until(lambda: len(said()) >= 2, LEASE_MS / 1000 + 2.0)
    assert "room 'sale'" in said()[0]
    assert "back to the code's" in said()[0]
    assert (await one.stats("sale"))["status"] == "open"
    await asyncio.sleep(LEASE_MS / 1000)  # more ticks of the new state: nothing more said
    assert len(said()) == 2


async def test_removing_a_visitor_redis_does_not_know_revokes_every_copy(processes: list[Store]) -> None:
    one, other = processes
    await admitted_and_copied(other, ROOM, "v1")
    assert isinstance(one.client, aioredis.Redis)
    await one.client.zrem(one.keys("sale")[3], "v1")  # lost, as by a failover: no message
    assert other.admissions.admitted_until("sale", "v1") is not None
    assert not await one.leave(ROOM, "v1")  # "held no place", and still revoked
    await until(lambda: revoked_by_name(other, "sale", "v1"), 10.0)
    assert other.admissions.admitted_until("sale", "v1") is None


async def test_removing_by_name_after_the_data_is_lost_revokes_every_copy(processes: list[Store]) -> None:
    """The console and the back office name the room; after FLUSHALL Redis
    no longer knows it (until a tick makes it anew), and the remove must
    still revoke every copy at once, not wait for that tick."""
    one, other = processes
    await admitted_and_copied(other, ROOM, "v1")
    assert isinstance(one.client, aioredis.Redis)
    await one.client.flushall()
    with pytest.raises(UnknownRoom, match="its data was lost"):  # a typo looks the same
        await one.leave("sale", "v1", who="operator")
    await until(lambda: revoked_by_name(other, "sale", "v1"), 10.0)  # not the tick's "*"
    assert other.admissions.admitted_until("sale", "v1") is None


async def test_sliding_sessions_and_identified_users_are_never_copied(processes: list[Store]) -> None:
    store = processes[0]
    sliding = Room("slide", paths=["/s"], capacity=5, session=60.0, sliding=True)
    store.invalidations.start()
    await until(lambda: store.invalidations.live)
    for _ in range(2):
        outcome = await store.enter(sliding, "v1")
        assert outcome.state == "active"
        assert not outcome.copyable
    assert store.admissions.admitted_until("slide", "v1") is None
    for _ in range(2):
        outcome = await store.enter(ROOM, "v2", user_hash="u" * 32)
        assert outcome.state == "active"
        assert not outcome.copyable
    assert store.admissions.admitted_until("sale", "v2") is None


async def test_a_copy_ends_with_the_session(processes: list[Store]) -> None:
    store = processes[0]
    short = Room("short", paths=["/s"], capacity=5, session=0.3)
    await admitted_and_copied(store, short, "v1")
    await asyncio.sleep(0.4)
    assert store.admissions.admitted_until("short", "v1") is None
    assert (await store.enter(short, "v1", join=False)).state != "active"


async def test_an_answer_read_before_a_heard_revocation_is_not_copied(processes: list[Store]) -> None:
    """Replies and messages come on two connections, in no common order: a
    revocation heard first still wins over the older answer."""
    store = processes[0]
    await admitted_and_copied(store, ROOM, "v0")
    copies = store.admissions
    now = store.redis_now_ms()
    sent = time.monotonic()
    copies.revoke("sale", "v1", now)
    copies.copy("sale", "v1", now + 60_000, read_at_ms=now - 1, sent_at=sent)
    copies.copy("sale", "v1", now + 60_000, read_at_ms=now, sent_at=sent)
    assert copies.admitted_until("sale", "v1") is None
    copies.copy("sale", "v1", now + 60_000, read_at_ms=now + 1, sent_at=sent)
    assert copies.admitted_until("sale", "v1") == now + 60_000
    # Nor an answer read before the subscription was (the revocations
    # between them were never heard).
    copies.copy("sale", "v2", now + 60_000, read_at_ms=store.invalidations.live_since - 1, sent_at=sent)
    assert copies.admitted_until("sale", "v2") is None
    copies.revoke("sale", "*", now + 5)
    assert copies.admitted_until("sale", "v0") is None
    copies.copy("sale", "v0", now + 60_000, read_at_ms=now + 4, sent_at=sent)
    assert copies.admitted_until("sale", "v0") is None


async def test_a_copy_ends_by_the_clock_of_the_request_s_sending(processes: list[Store]) -> None:
    """The script ran at some moment after the request was sent: the copy
    counts the session's remaining time from the sending, so it never
    outlives the session in Redis, however long the reply took to come."""
    store = processes[0]
    await admitted_and_copied(store, ROOM, "v0")
    copies = store.admissions
    now = store.redis_now_ms()
    # Answered with 200 ms left, for a request sent 150 ms ago: 49 ms left.
    copies.copy("sale", "v1", now + 200, read_at_ms=now, sent_at=time.monotonic() - 0.15)
    assert copies.admitted_until("sale", "v1") == now + 200
    await asyncio.sleep(0.06)
    assert copies.admitted_until("sale", "v1") is None
    # Sent 200 ms ago with 200 ms left: already over.
    copies.copy("sale", "v2", now + 200, read_at_ms=now, sent_at=time.monotonic() - 0.2)
    assert copies.admitted_until("sale", "v2") is None


async def test_a_closed_subscription_drops_every_copy_until_it_is_back(processes: list[Store]) -> None:
    store = processes[0]
    await admitted_and_copied(store, ROOM, "v1")
    assert isinstance(store.client, aioredis.Redis)
    await store.client.client_kill_filter(_type="pubsub")
    await until(lambda: not store.invalidations.live, 1.0)
    assert store.admissions.admitted_until("sale", "v1") is None
    # Meanwhile Redis decides, and nothing it says is kept.
    assert (await store.enter(ROOM, "v1")).state == "active"
    assert store.admissions.admitted_until("sale", "v1") is None
    await until(lambda: store.invalidations.live, 3.0)
    assert (await store.enter(ROOM, "v1")).state == "active"
    assert store.admissions.admitted_until("sale", "v1") is not None


async def test_the_lease_is_renewed_while_the_subscription_answers(processes: list[Store]) -> None:
    store = processes[0]
    await admitted_and_copied(store, ROOM, "v1")
    for _ in range(round(3 * LEASE / 0.05)):
        assert store.invalidations.live
        assert store.admissions.admitted_until("sale", "v1") is not None
        await asyncio.sleep(0.05)


async def test_the_subscription_pings_at_its_pace_not_in_a_loop(own_server: EmbeddedServer) -> None:
    # A ping went out again as soon as the last one was answered: at the
    # round trip's pace, which kept an idle app process busy on one core.
    store = Store(connect(own_server.url, 5.0))
    client = aioredis.Redis.from_url(own_server.url)
    try:
        store.invalidations.start()
        await until(lambda: store.invalidations.live)
        before = await pings(client)
        await asyncio.sleep(1.0)
        sent = await pings(client) - before
        assert 1 / PING_EVERY - 2 <= sent <= 1 / PING_EVERY + 2, sent
        assert store.invalidations.live
    finally:
        await store.aclose()
        await client.aclose()


async def pings(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_ping", {}).get("calls", 0))


@pytest.mark.parametrize("moment", [0.0, 0.1, 0.2, 0.3])
async def test_a_hung_redis_drops_every_copy_within_the_stated_limit(
    own_server: EmbeddedServer, moment: float
) -> None:
    """SIGSTOP leaves the subscription's connection open and silent: the copy
    must still go within LEASE of the hang, whenever in the ping's cycle the
    hang starts (the moments shift it across one cycle), and stay gone."""
    store = Store(connect(own_server.url, 0.25))
    try:
        await admitted_and_copied(store, ROOM, "v1")
        await asyncio.sleep(moment)
        hang(own_server)
        try:
            took = await until(lambda: store.admissions.admitted_until("sale", "v1") is None, LEASE + 2)
            assert took <= LEASE + MARGIN, f"copy kept {took:.2f} s into the hang"
            for _ in range(10):
                assert not store.invalidations.live
                assert store.admissions.admitted_until("sale", "v1") is None
                await asyncio.sleep(0.1)
        finally:
            resume(own_server)
        await until(lambda: store.invalidations.live, 5.0)
    finally:
        await store.aclose()


async def test_a_cluster_copies_nothing(servers: dict[str, object]) -> None:
    """redis-py's asyncio cluster client has no pub/sub: every request asks."""
    nodes = servers["get"]("cluster")  # type: ignore[operator]
    store = Store(connect(f"redis+cluster://127.0.0.1:{nodes[0].port}", 5.0))
    room = Room(f"c{time.time_ns()}", paths=["/c"], capacity=10, session=60.0)
    try:
        for _ in range(3):
            outcome = await store.enter(room, "v1")
            assert outcome.state == "active"
        assert not store.invalidations.live
        assert store.admissions.admitted_until(room.name, "v1") is None
    finally:
        await store.aclose()


async def test_the_gate_copies_unless_told_not_to(make_gate: MakeGate) -> None:
    for local, hits in ((True, 3), (False, 0)):
        gate = await make_gate(rooms=[ROOM], local_admissions=local)
        async with client_for(gate) as client:
            assert (await client.get("/checkout")).status_code == 200
            if local:
                await until(lambda g=gate: g.store.invalidations.live)  # type: ignore[misc]
                assert (await client.get("/checkout")).status_code == 200  # copied now
            for _ in range(3):
                assert (await client.get("/checkout")).status_code == 200
        assert gate.store.admissions.hits == hits
        assert gate.store.invalidations.live is local


def test_the_setting_is_read_and_checked() -> None:
    from queuegate import ConfigError
    from queuegate.options import Settings

    assert not Settings.load({"QUEUEGATE_LOCAL_ADMISSIONS": "off"}, secret_key=SECRET).local_admissions
    assert Settings.load({}, secret_key=SECRET).local_admissions
    with pytest.raises(ConfigError, match="QUEUEGATE_LOCAL_ADMISSIONS"):
        Settings.load({"QUEUEGATE_LOCAL_ADMISSIONS": "maybe"}, secret_key=SECRET)
    with pytest.raises(ConfigError, match="local_admissions"):
        Settings.load({}, secret_key=SECRET, local_admissions="yes")


@pytest.mark.parametrize("config", ["plain", "identify", "bind"])
async def test_the_quick_path_admits_only_whom_the_full_decision_admits(
    make_gate: MakeGate, config: str
) -> None:
    """The gate decides an admitted visitor from the copy before reading
    who is asking in full (``Decisions.copied_admission``). For every cookie
    a request may carry (the copied visitor or another, a user's token,
    a bound one, each end the cookie may carry, another room's, tampered),
    what the quick path admits, the full decision asking Redis admits too,
    with the same end and no new cookie; and it does admit the plain case."""
    import itertools

    from queuegate.decisions import PASS_LAG_MS
    from queuegate.tokens import Tokens

    from .conftest import http_scope

    options: dict[str, object] = {"rooms": [ROOM], "prefix": f"q{time.time_ns()}"}
    if config == "identify":
        options["identify"] = lambda request: request.headers.get("x-user")
    elif config == "bind":
        options["bind_cookie"] = ["user_agent"]
    quick = await make_gate(**options)
    asking = await make_gate(local_admissions=False, **options)
    await admitted_and_copied(quick.store, ROOM, "v1")
    until_ms = quick.store.admissions.admitted_until("sale", "v1")
    assert until_ms is not None
    tokens = Tokens([SECRET], 86400)
    binding = tokens.fingerprint(b"|agent")
    taken = 0
    for room, visitor, user, carried, bound, tampered in itertools.product(
        ["sale", "other"],
        ["v1", "v2"],
        [None, tokens.user_hash("ann")],
        # (the lag check at both its ends: one more or less renews, or does not)
        [0, until_ms, until_ms - 1, until_ms + 1, until_ms - PASS_LAG_MS - 1, until_ms - PASS_LAG_MS],
        ["", binding],
        [False, True],
    ):
        token = tokens.issue(room, visitor, user, carried, bound)
        if tampered:
            token = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
        headers = [(b"cookie", f"qg_sale={token}".encode()), (b"user-agent", b"agent")]
        if user is not None:
            headers.append((b"x-user", b"ann"))
        scope = http_scope("/checkout", headers=headers)
        copied = quick.decisions.copied_admission(ROOM, scope)
        if copied is None:
            continue
        taken += 1
        assert config == "plain", "the quick path must not guess who is signed in or bound"
        full = http_scope("/checkout", headers=headers)
        page, set_headers = await asking.decisions.decide(ROOM, full)
        assert page is None
        assert set_headers == []
        admitted = full["queuegate"]
        assert (admitted.visitor, admitted.expires_ms) == (copied.visitor, copied.expires_ms)
    if config == "plain":
        # The copied visitor with a cookie that needs nothing renewed: the
        # end it was given, or one that lags it by a minute or less.
        assert taken == 3
