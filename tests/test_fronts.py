"""Polls near the front answered from a copy of the line's first places
(queuegate/fronts.py): the rank a copy gives is the rank Redis gives once
the process has heard every message published, whatever moved the line
(another process's leave or removal, an admission, a skip, a drain, new
settings) or grew it; and no copy is used when the subscription's lease
does not hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer
from queuegate.fronts import FRONT_PLACES, MIN_READ_INTERVAL
from queuegate.invalidations import LEASE
from queuegate.outcomes import text
from queuegate.store import SETTLED_MARGIN_MS, connect

from .test_admissions import MARGIN, until
from .test_deadlines import hang, resume

pytestmark = pytest.mark.anyio

# Nobody is let in by time during a test: the line moves only when a test
# moves it (a leave, a removal, a drain, a new capacity).
ROOM = Room("front", paths=["/front"], capacity=1, session=3600.0, client_limit=0, abandon=0)


@pytest.fixture
async def two(redis_url: str) -> AsyncIterator[tuple[Store, Store]]:
    """The process that polls (with its subscription live) and another."""
    polls, other = Store(connect(redis_url, 5.0)), Store(connect(redis_url, 5.0))
    polls.invalidations.start()
    await until(lambda: polls.invalidations.live)
    yield polls, other
    await polls.aclose()
    await other.aclose()


async def _truth(store: Store, room: Room) -> list[str]:
    return [text(m) for m in await store.client.zrange(store.keys(room.name)[1], 0, -1)]


async def _heard_everything(polls: Store, room: Room, published: int) -> None:
    """Wait until ``polls`` heard the ``published`` messages of the room."""

    def heard() -> bool:
        version = polls.invalidations.line_version(room.name)
        return version is not None and version[1] >= published

    await until(heard)


async def _ranks_agree(polls: Store, room: Room, oracle: Store | None = None) -> int:
    """Every waiting visitor's rank as ``polls`` answers it equals Redis's
    (or, given ``oracle``, a store that copies nothing, its answer: None in
    a room not settled); returns how many were answered from the copy."""
    before = polls.fronts.hits
    line = await _truth(polls, room)
    for rank, visitor in enumerate(line):
        if oracle is None:
            assert await polls.front_rank(room, visitor) == rank, (visitor, rank)
            continue
        # Asked just before and just after: a process's tick may settle the
        # room in between (new settings unsettle it; a tick that moves
        # nobody publishes nothing), and the answer is then either.
        earlier = await oracle.front_rank(room, visitor)
        got = await polls.front_rank(room, visitor)
        later = await oracle.front_rank(room, visitor)
        assert got in (earlier, later), (visitor, rank, earlier, got, later)
    assert await polls.front_rank(room, "nobody") is None
    return polls.fronts.hits - before


async def _a_minute_to_spare(store: Store, seconds: float = 10.0) -> None:
    """Wait, if Redis's minute ends within ``seconds``, for the next one: a
    room is settled until its analytics' minute ends at the latest, and a
    poll after that end, before a call settles it again, is no simple
    answer (None). CI's compiled run once straddled it (``None == 0``)."""
    second, micros = await store.client.time()
    into = int(second) % 60 + int(micros) / 1e6
    if into > 60 - seconds:
        await asyncio.sleep(60 - into + 0.1)


async def test_polls_near_the_front_need_no_round_trip(two: tuple[Store, Store]) -> None:
    polls, other = two
    await _a_minute_to_spare(other)
    await other.enter_many(ROOM, [f"v{i:03d}" for i in range(40)])
    await _ranks_agree(polls, ROOM)  # the first poll reads the copy
    calls = await _commands(polls.client)
    answered = await _ranks_agree(polls, ROOM)
    # Only the check for "nobody" asked Redis (plus this test's own reads).
    assert answered == 39  # v000 is inside (capacity 1)
    assert await _commands(polls.client) - calls <= 4


async def _commands(client: aioredis.Redis | aioredis.RedisCluster) -> int:
    stats = await client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_zrank", "cmdstat_zrange"))


async def test_another_process_s_leave_reaches_the_copy_within_its_message(two: tuple[Store, Store]) -> None:
    polls, other = two
    await other.enter_many(ROOM, [f"v{i:03d}" for i in range(20)])
    await _ranks_agree(polls, ROOM)
    assert await polls.front_rank(ROOM, "v010") == 9
    before = _version(polls)
    assert await other.leave(ROOM, "v005")
    took = await until(lambda: _version(polls) != before)
    assert took < LEASE
    assert await polls.front_rank(ROOM, "v010") == 8
    assert await polls.front_rank(ROOM, "v005") is None


def _version(store: Store) -> tuple[int, int] | None:
    return store.invalidations.line_version(ROOM.name)


async def test_newcomers_behind_a_copy_of_a_short_line_get_their_exact_rank(two: tuple[Store, Store]) -> None:
    polls, other = two
    await other.enter_many(ROOM, ["a", "b", "c"])
    await _ranks_agree(polls, ROOM)
    await other.enter_many(ROOM, ["d", "e"])  # joins publish nothing: the back only grew
    assert await polls.front_rank(ROOM, "e") == 3
    assert await polls.front_rank(ROOM, "b") == 0
    await asyncio.sleep(MIN_READ_INTERVAL)
    assert await polls.front_rank(ROOM, "e") == 3  # this one reads the copy again
    assert await _ranks_agree(polls, ROOM) == 4


async def test_a_line_that_moves_all_the_time_is_read_at_most_every_interval(
    two: tuple[Store, Store],
) -> None:
    """Each read of the front costs Redis as much as a few polls: however
    often the line moves, a process reads a room's front at most every
    MIN_READ_INTERVAL, and the polls in between ask with the plain commands
    (still exact). (A room is settled until the analytics' minute ends at
    the latest: a poll after a minute's end that no call has settled since
    is no simple answer, None, and the full call answers it. A CI run on
    loaded cores crossed one in this loop.)"""
    polls, other = two
    visitors = [f"v{i:04d}" for i in range(400)]
    await other.enter_many(ROOM, visitors)
    reads = polls.fronts.reads
    started = asyncio.get_running_loop().time()
    polled = unsettled = 0
    for leaving in reversed(visitors[200:]):  # someone at the back leaves: the line moved
        minute = polls.redis_now_ms() // 60_000
        await other.leave(ROOM, leaving)
        for _ in range(3):
            rank = await polls.front_rank(ROOM, "v0100")
            if rank is None:
                assert (polls.redis_now_ms() + SETTLED_MARGIN_MS) // 60_000 > minute, (
                    "unsettled within a minute"
                )
                unsettled += 1
                continue
            assert rank == 99  # v0000 is inside
            polled += 1
    seconds = asyncio.get_running_loop().time() - started
    made = polls.fronts.reads - reads
    assert 1 <= made <= seconds / MIN_READ_INTERVAL + 2, (made, seconds, polled)
    assert polled + unsettled == 600, (polled, unsettled)
    assert unsettled <= 3, (polled, unsettled)  # those of one leave, just after a minute's end


async def test_a_long_line_s_copy_holds_its_first_places_only(two: tuple[Store, Store]) -> None:
    polls, other = two
    await other.enter_many(ROOM, [f"v{i:05d}" for i in range(FRONT_PLACES + 50)])
    assert await polls.front_rank(ROOM, "v00001") == 0
    hits = polls.fronts.hits
    assert await polls.front_rank(ROOM, f"v{FRONT_PLACES:05d}") == FRONT_PLACES - 1
    assert await polls.front_rank(ROOM, f"v{FRONT_PLACES + 10:05d}") == FRONT_PLACES + 9  # asked Redis
    assert polls.fronts.hits == hits + 1


EXAMPLES: list[int] = []  # a room of its own for each example


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("join"), st.integers(1, 6)),
            st.tuples(st.just("leave"), st.integers(0, 30)),
            st.tuples(st.just("capacity"), st.integers(1, 8)),
            st.tuples(st.just("release"), st.integers(0, 8)),
            st.tuples(st.just("drain"), st.just(0)),
        ),
        min_size=1,
        max_size=8,
    )
)
async def test_after_any_change_every_rank_is_redis_s_once_its_message_is_heard(
    redis_url: str, steps: list[tuple[str, int]]
) -> None:
    polls, other = Store(connect(redis_url, 5.0)), Store(connect(redis_url, 5.0))
    oracle = Store(connect(redis_url, 5.0), local_admissions=False)
    listener = aioredis.Redis.from_url(redis_url).pubsub()
    EXAMPLES.append(len(EXAMPLES))
    name = f"prop{len(EXAMPLES)}"
    room = Room(name, paths=["/p"], capacity=1, session=3600.0, client_limit=0, abandon=0)
    try:
        await listener.psubscribe(f"qg:{{{name}}}:moved")
        await _drain_messages(listener)
        polls.invalidations.start()
        await until(lambda: polls.invalidations.live)
        published = 0
        serial = 0
        await other.enter_many(room, [f"j{serial + i:03d}" for i in range(5)])
        serial += 5
        answered = await _ranks_agree(polls, room, oracle)
        for kind, n in steps:
            line = await _truth(other, room)
            active = [text(m) for m in await other.client.zrange(other.keys(room.name)[3], 0, -1)]
            if kind == "join":
                await other.enter_many(room, [f"j{serial + i:03d}" for i in range(n)])
                serial += n
            elif kind == "leave" and line:
                await other.leave(room, line[n % len(line)])
            elif kind == "capacity":
                await other.configure(room, capacity=n)
            elif kind == "release" and active:
                await other.release(room, active[n % len(active)])
            elif kind == "drain":
                await other.drain(room)
            published += await _drain_messages(listener)
            await _heard_everything(polls, room, published)
            # The answer the plain commands give (no copy), before and after
            # a call settles the room again (new settings unsettle it).
            answered += await _ranks_agree(polls, room, oracle)
            await other.stats(room)
            published += await _drain_messages(listener)
            await _heard_everything(polls, room, published)
            answered += await _ranks_agree(polls, room, oracle)
        # The copy did answer: on loaded cores it may not have been read in
        # time for any step of a short example (a CI run saw none), so it is
        # asked again, the room settled, with somebody in line.
        if not answered:  # (more than any capacity drawn: somebody waits)
            await other.enter_many(room, [f"j{serial + i:03d}" for i in range(10)])
        for _ in range(20):
            if answered:
                break
            await other.stats(room)
            published += await _drain_messages(listener)
            await _heard_everything(polls, room, published)
            answered += await _ranks_agree(polls, room, oracle)
            await asyncio.sleep(0.05)
        assert answered > 0
    finally:
        await listener.aclose()  # type: ignore[no-untyped-call]
        for store in (polls, other, oracle):
            await store.aclose()


async def _drain_messages(listener: aioredis.client.PubSub) -> int:
    """Messages the test's own subscriber got since last asked (a ping
    answered proves it has all those published before)."""
    count = 0
    await listener.ping()
    while True:
        message = await listener.get_message(timeout=1.0)
        assert message is not None, "no answer to the ping"
        if message["type"] == "pong":
            return count
        if message["type"] == "pmessage":
            count += 1


@pytest.mark.parametrize("moment", [0.0, 0.1, 0.2])
async def test_a_hung_redis_stops_the_copy_within_the_lease(
    own_server: EmbeddedServer, moment: float
) -> None:
    polls = Store(connect(own_server.url, 0.25), timeout=0.25)
    other = Store(connect(own_server.url, 5.0))
    try:
        polls.invalidations.start()
        await until(lambda: polls.invalidations.live)
        await other.enter_many(ROOM, ["a", "b", "c"])
        await _ranks_agree(polls, ROOM)
        await asyncio.sleep(moment)
        hang(own_server)
        try:
            took = await until(lambda: _version(polls) is None, LEASE + 2)
            assert took <= LEASE + MARGIN, f"copy trusted {took:.2f} s into the hang"
            hits = polls.fronts.hits
            for _ in range(5):
                with pytest.raises(Exception, match="within"):
                    await polls.front_rank(ROOM, "c")  # asks Redis, which does not answer
            assert polls.fronts.hits == hits
        finally:
            resume(own_server)
    finally:
        await polls.aclose()
        await other.aclose()
