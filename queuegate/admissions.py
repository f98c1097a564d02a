"""Admitted visitors decided in-process: a local copy of "visitor V of room
R is admitted until T" that Redis keeps coherent.

The rules stay in the scripts: an ``enter`` answer says whether its
admission may be copied (a fixed session, an anonymous visitor); the scripts
that end an admission early (``remove.lua``: release, leave) publish the
visitor on ``<prefix>:{room}:revoked``, and ``configure`` publishes ``*``
(every copy of the room goes: a setting such as ``sliding`` may have
changed). Each process holds one pattern subscription and drops what it
hears of. A session's end needs no message: the copy holds its end, on this
host's monotonic clock, counted from when the request was *sent* (Redis ran
the script after that, so the copy ends at or before the session does, by
at most the request's round trip plus the millisecond Redis rounds to).

The copy is used only under a lease. The subscription's connection is
pinged every ``PING_EVERY`` seconds; messages and the answer to a ping come
in order on that connection, so an answered ping proves every revocation
published before it was heard. The copy is trusted for ``LEASE`` seconds
from the sending of the last answered ping, and dropped whole when the lease
runs out, whatever the listener is doing (blocked in a reconnect, or its
connection silent under a hung Redis). So a revocation reaches every process
within its delivery while the subscription works, and within ``LEASE`` when
it does not.

Two more races are closed:

- a revocation heard *before* the reply it concerns (two connections, no
  common order): each revocation is remembered with its Redis time for
  ``REMEMBER_MS``, and a reply read at or before it is not copied;
- a new subscription (the first, or redis-py reconnecting on its own, seen
  as a second confirmation): revocations before it were not heard, so the
  copy is emptied and no reply read before it is copied.

The same subscription hears ``<prefix>:{room}:moved``, which the scripts
publish whenever a room's line changes other than at its back (someone
admitted, skipped, gone, removed; a drain; new settings): each room's *line
version* counts those messages, with an epoch for the subscription, and
``queuegate.fronts`` keeps copies of the lines' first places under it.

Without pub/sub (a Redis Cluster, where redis-py's asyncio client has none)
nothing is copied and every request asks Redis, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["LocalAdmissions"]

logger = logging.getLogger("queuegate")

REMEMBER_MS = 30_000  # revocations remembered this long (more than any call's deadline)
PING_EVERY = 0.25  # seconds between pings on the subscription
LEASE = 1.0  # seconds the copy is trusted after the last answered ping was sent
RETRY_SUBSCRIBE = 1.0  # seconds between attempts to (re)subscribe
MAX_ENTRIES = 100_000  # a bound on the copy: past it, the oldest half goes


def _stopping() -> bool:
    """This task was cancelled, even if the CancelledError was lost: on
    Python 3.11 redis-py's ``asyncio.wait_for`` swallows a cancel that lands
    as its call completes, and ``asyncio.run`` cancels a task only once
    when it shuts down."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class LocalAdmissions:
    """One process's copy of the admissions it has seen, kept coherent by
    Redis's revocation messages. ``redis_now`` gives Redis's time (ms)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        prefix: str,
        redis_now: Callable[[], int],
        *,
        enabled: bool = True,
        on_reset: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._on_reset = on_reset  # told of each room whose every copy goes (configure)
        self._enabled = enabled
        self._pattern = f"{prefix}:*:revoked"
        self._moved_pattern = f"{prefix}:*:moved"
        self._prefix_length = len(prefix) + 2  # "<prefix>:{"
        self._redis_now = redis_now
        # (room, visitor) -> (the admission's end in Redis ms, its end on
        # time.monotonic(), never later than Redis's)
        self._until: dict[tuple[str, str], tuple[int, float]] = {}
        self._revoked: dict[tuple[str, str], int] = {}  # (room, visitor or "*") -> Redis ms
        self._fresh_until = 0.0  # monotonic: the lease's end
        self._live_since = 0  # Redis ms by which the subscription was confirmed
        self._task: asyncio.Task[None] | None = None
        self.hits = 0
        # Messages heard that moved each room's line, and the subscription's
        # epoch (one more whenever it is lost or made): see line_version.
        self._moves: dict[str, int] = {}
        self._epoch = 0

    @property
    def live(self) -> bool:
        """The lease holds: copies may be made and used."""
        return time.monotonic() <= self._fresh_until

    @property
    def live_since(self) -> int:
        """Redis's time (ms) by which the subscription was confirmed."""
        return self._live_since

    def line_version(self, room: str) -> tuple[int, int] | None:
        """The version of the room's line as this process has heard of it,
        or None when the lease does not hold: two equal versions mean no
        message moved the line between them (and none can have gone
        unheard)."""
        if time.monotonic() > self._fresh_until:
            return None
        return self._epoch, self._moves.get(room, 0)

    def start(self) -> None:
        """Subscribe (once, from a running event loop); copies start when the
        subscription is up."""
        if self._enabled and self._task is None and isinstance(self._client, aioredis.Redis):
            self._task = asyncio.get_running_loop().create_task(self._listen())

    def admitted_until(self, room: str, visitor: str) -> int | None:
        """The end (Redis ms) of the visitor's admission if this process
        holds it and it has not ended; else None (ask Redis)."""
        copied = self._until.get((room, visitor))
        if copied is None:
            return None
        now = time.monotonic()
        if now > self._fresh_until:
            self._until.clear()  # revocations may have gone unheard
            return None
        if now >= copied[1]:
            del self._until[(room, visitor)]
            return None
        self.hits += 1
        return copied[0]

    def copy(self, room: str, visitor: str, until_ms: int, read_at_ms: int, sent_at: float) -> None:
        """Keep an admission Redis answered at ``read_at_ms`` (its time) for
        a request sent at ``sent_at`` (``time.monotonic()``), unless the
        subscription is down or a revocation at or after that time was heard."""
        if not self.live or read_at_ms < self._live_since:
            return  # unheard revocations may predate the subscription
        for key in ((room, visitor), (room, "*")):
            revoked = self._revoked.get(key)
            if revoked is not None and revoked >= read_at_ms:
                return
        if len(self._until) >= MAX_ENTRIES:
            for key in list(self._until)[: MAX_ENTRIES // 2]:
                del self._until[key]
        # The script ran at or after sent_at, and Redis's millisecond is
        # rounded down: the session ends no earlier than this.
        self._until[(room, visitor)] = (until_ms, sent_at + (until_ms - read_at_ms - 1) / 1000)

    def forget(self, room: str, visitor: str) -> None:
        """This process ended the admission itself (release, leave)."""
        self._until.pop((room, visitor), None)

    def moved(self, room: str) -> None:
        """A message said the room's line moved."""
        if len(self._moves) >= MAX_ENTRIES and room not in self._moves:
            self._moves.clear()
            self._epoch += 1
        self._moves[room] = self._moves.get(room, 0) + 1

    def revoke(self, room: str, visitor: str, at_ms: int) -> None:
        if visitor == "*":
            self.moved(room)
            for key in [key for key in self._until if key[0] == room]:
                del self._until[key]
            if self._on_reset is not None:
                self._on_reset(room)
        else:
            self._until.pop((room, visitor), None)
        self._revoked[(room, visitor)] = at_ms
        if len(self._revoked) > 10_000:
            horizon = self._redis_now() - REMEMBER_MS
            self._revoked = {key: at for key, at in self._revoked.items() if at >= horizon}

    def _lost(self) -> None:
        self._fresh_until = 0.0
        self._until.clear()
        self._epoch += 1

    async def _listen(self) -> None:
        assert isinstance(self._client, aioredis.Redis)
        while not _stopping():
            pubsub = self._client.pubsub()
            try:
                await pubsub.psubscribe(self._pattern, self._moved_pattern)
                async with asyncio.timeout(LEASE * 2):  # not wait_for: it can swallow a cancel
                    await self._confirmed(pubsub, 2)
                seconds, micros = await self._client.time()
                self._live_since = seconds * 1000 + micros // 1000
                self._epoch += 1  # lines moved unheard before the subscription
                await self._hear(pubsub)
            except (RedisError, OSError, TimeoutError) as exc:
                logger.info("queuegate: admissions' subscription lost (%s); Redis decides meanwhile", exc)
            finally:
                self._lost()
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            if not _stopping():
                await asyncio.sleep(RETRY_SUBSCRIBE)

    @staticmethod
    async def _confirmed(pubsub: aioredis.client.PubSub, patterns: int) -> None:
        while not _stopping():
            message = await pubsub.get_message(timeout=PING_EVERY)
            if message is not None and message["type"] == "psubscribe":
                patterns -= 1
                if not patterns:
                    return

    async def _hear(self, pubsub: aioredis.client.PubSub) -> None:
        sent: deque[float] = deque()  # when each unanswered ping went out
        last = time.monotonic()  # when the latest ping went out, answered or not
        sent.append(last)
        await pubsub.ping()
        while not _stopping():
            message = await pubsub.get_message(timeout=PING_EVERY / 5)
            now = time.monotonic()
            if message is not None:
                kind = message["type"]
                if kind == "pmessage":
                    self._heard(message["channel"], message["data"])
                elif kind == "pong" and sent:
                    # Everything published before this ping has been heard.
                    self._fresh_until = sent.popleft() + LEASE
                elif kind == "psubscribe":
                    raise ConnectionError("redis-py subscribed again on a new connection")
            if now > self._fresh_until and sent and now - sent[0] > LEASE:
                raise TimeoutError(f"no answer to a ping in {LEASE} s")
            if now - last >= PING_EVERY:
                last = now
                sent.append(now)
                await pubsub.ping()

    def _heard(self, channel: bytes, data: bytes) -> None:
        name = channel.decode()
        if name.endswith("}:moved"):
            self.moved(name[self._prefix_length : -len("}:moved")])
            return
        room = name[self._prefix_length : -len("}:revoked")]
        visitor, _, at = data.decode().rpartition(":")
        self.revoke(room, visitor, int(at))

    async def aclose(self) -> None:
        task, self._task = self._task, None
        # Cancelled until done: a cancel that lands as one of redis-py's own
        # asyncio.wait_for calls completes is swallowed on Python 3.11.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=0.1)
        self._lost()
