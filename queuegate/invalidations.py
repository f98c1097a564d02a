"""What Redis says changed, heard by every process under a lease.

Copies a process keeps of what Redis decided (admissions,
``queuegate.admissions``; the first places of a line, ``queuegate.fronts``)
stay coherent through messages the scripts publish:

- ``<prefix>:{room}:revoked``: an admission ended early (``remove.lua``:
  release, leave) names the visitor, ``configure`` names ``*`` (every copy
  of the room goes: a setting such as ``sliding`` may have changed);
- ``<prefix>:{room}:moved``: the room's line changed other than at its back
  (someone admitted, skipped, gone, removed; a drain; new settings). Each
  room's *line version* counts these messages, with an epoch that changes
  whenever the subscription is lost or made, so two equal versions mean no
  message moved the line between them.

Each process holds one pattern subscription to both. Copies are used only
under a lease. The subscription's connection is pinged every
``PING_EVERY`` seconds; messages and the answer to a ping come in order on
that connection, so an answered ping proves every message published before
it was heard. The lease runs ``LEASE`` seconds from the sending of the last
answered ping, and copies are dropped whole when it runs out, whatever the
listener is doing (blocked in a reconnect, or its connection silent under a
hung Redis). So a change reaches every process within its delivery while
the subscription works, and within ``LEASE`` when it does not.

A new subscription (the first, or redis-py reconnecting on its own, seen
as a second confirmation) may have missed messages before it: copies are
emptied when a subscription is lost, and ``live_since`` says from which
Redis time on replies may be copied.

The waiting pages' streams (``queuegate.feeds``) are woken by the same
messages, after the line's version has moved: a stream's check never
answers from a copy its wake-up has not reached yet. A stream that reads
its place asks for ``caught_up()`` after the read: the reply and the
messages published before it come on two connections, in no set order, and
a message heard after the reply it is already counted in would be counted
twice. With copies turned off
(``local_admissions=False``) the subscription still serves the streams,
and the lease never holds.

Without pub/sub (a Redis Cluster, where redis-py's asyncio client has none)
the lease never holds: nothing is copied and every request asks Redis.
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

from .tasks import stop

__all__ = ["LEASE", "PING_EVERY", "Invalidations"]

logger = logging.getLogger("queuegate")

PING_EVERY = 0.25  # seconds between pings on the subscription
LEASE = 1.0  # seconds copies are trusted after the last answered ping was sent
# A subscription with a ping unanswered this long is given up and made
# anew. Longer than LEASE, which lapses by itself: a process whose own loop
# was busy (a long garbage collection) reads the late answer, and every
# message before it, in order, and keeps a subscription that lost nothing.
DEAD_AFTER = 5 * LEASE
RETRY_SUBSCRIBE = 1.0  # seconds between attempts to (re)subscribe
MAX_ROOMS = 100_000  # a bound on the rooms with a line version: past it, a new epoch


def _stopping() -> bool:
    """This task was cancelled, even if the CancelledError was lost: on
    Python 3.11 redis-py's ``asyncio.wait_for`` swallows a cancel that lands
    as its call completes, and ``asyncio.run`` cancels a task only once
    when it shuts down."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Invalidations:
    """One process's subscription to what Redis says changed. ``on_revoke``
    hears each revocation (room, visitor or ``*``, Redis ms); ``on_lost``
    is told when the subscription is lost (every copy must go); each of
    ``on_moved`` hears the rooms whose line moved, with what the script
    pushed (see ``queuegate.feeds``). ``enabled``: copies may
    be made (else the lease never holds)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        prefix: str,
        *,
        enabled: bool = True,
        on_revoke: Callable[[str, str, int], None],
        on_lost: Callable[[], None],
    ) -> None:
        self._client = client
        self._enabled = enabled
        self._patterns = (f"{prefix}:*:revoked", f"{prefix}:*:moved")
        self._prefix_length = len(prefix) + 2  # "<prefix>:{"
        self._on_revoke = on_revoke
        self._on_lost = on_lost
        # The lease's end, on time.monotonic(): a plain attribute, read by
        # every request an admission's copy answers (a property cost 600
        # instructions of the 20,000 the gate spends on one).
        self.fresh_until = 0.0
        self._live_since = 0  # Redis ms by which the subscription was confirmed
        self._task: asyncio.Task[None] | None = None
        # Messages heard that moved each room's line, and the subscription's
        # epoch (one more whenever it is lost or made): see line_version.
        self._moves: dict[str, int] = {}
        self._epoch = 0
        self.on_moved: list[Callable[[str, bytes], None]] = []
        # Told when a subscription is confirmed: what it may have missed before.
        self.on_subscribed: list[Callable[[], None]] = []
        # Told when it is lost, or an attempt to make one failed (Redis may
        # be away): pushes go unheard until the next on_subscribed.
        self.on_unsubscribed: list[Callable[[], None]] = []
        self.subscribed = asyncio.Event()  # set while a confirmed subscription listens
        # The pings sent and not answered yet: when each went out, and the
        # callers of caught_up() it answers; those whose ping is not sent yet.
        self._sent: deque[tuple[float, list[asyncio.Future[None]]]] = deque()
        self._unsent: list[asyncio.Future[None]] = []

    @property
    def live(self) -> bool:
        """The lease holds: copies may be made and used."""
        return time.monotonic() <= self.fresh_until

    @property
    def epoch(self) -> int:
        """Changes whenever the subscription is lost or made: messages may
        have gone unheard between two different epochs."""
        return self._epoch

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def live_since(self) -> int:
        """Redis's time (ms) by which the subscription was confirmed."""
        return self._live_since

    def line_version(self, room: str) -> tuple[int, int] | None:
        """The version of the room's line as this process has heard of it,
        or None when the lease does not hold: two equal versions mean no
        message moved the line between them (and none can have gone
        unheard)."""
        if time.monotonic() > self.fresh_until:
            return None
        return self._epoch, self._moves.get(room, 0)

    def heard(self, room: str) -> tuple[int, int]:
        """The room's line version as heard, lease or not (the streams'
        question: did a message of the room come between two moments)."""
        return self._epoch, self._moves.get(room, 0)

    async def caught_up(self) -> bool:
        """Until every message published before this call has been heard:
        a ping sent after it is answered (see the module). True at once
        without a subscription (nothing is heard then); False if the
        answer took longer than ``LEASE``. A subscription lost meanwhile
        ends the wait and changes the epoch."""
        if not self.subscribed.is_set():
            return True
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._unsent.append(answered)
        try:
            async with asyncio.timeout(LEASE):
                await answered
        except TimeoutError:
            return False
        return True

    def start(self, *, wakeups: bool = False) -> None:
        """Subscribe (once, from a running event loop): for the copies, if
        they are enabled (they start when the subscription is up), and for
        the streams' ``wakeups`` always."""
        if self._task is None and (self._enabled or wakeups) and isinstance(self._client, aioredis.Redis):
            self._task = asyncio.get_running_loop().create_task(self._listen())

    def moved(self, room: str) -> None:
        """A message said the room's line moved."""
        if len(self._moves) >= MAX_ROOMS and room not in self._moves:
            self._moves.clear()
            self._epoch += 1
        self._moves[room] = self._moves.get(room, 0) + 1

    def _lost(self) -> None:
        self.fresh_until = 0.0
        self._epoch += 1
        self.subscribed.clear()
        waiting = [answered for _, waiters in self._sent for answered in waiters] + self._unsent
        self._sent.clear()
        self._unsent = []
        for answered in waiting:
            if not answered.done():
                answered.set_result(None)  # in the new epoch: what they read is read again
        self._on_lost()
        if self._task is None or _stopping():
            return  # closing: nothing to tell
        for listener in self.on_unsubscribed:
            try:
                listener()
            except Exception:  # one listener's bug must not end the subscription
                logger.exception("queuegate: a listener failed on the subscription's loss")

    async def _listen(self) -> None:
        assert isinstance(self._client, aioredis.Redis)
        while not _stopping():
            pubsub = self._client.pubsub()
            try:
                await pubsub.psubscribe(*self._patterns)
                async with asyncio.timeout(LEASE * 2):  # not wait_for: it can swallow a cancel
                    await self._confirmed(pubsub, len(self._patterns))
                seconds, micros = await self._client.time()
                self._live_since = seconds * 1000 + micros // 1000
                self._epoch += 1  # lines moved unheard before the subscription
                self.subscribed.set()
                for listener in self.on_subscribed:
                    listener()
                await self._hear(pubsub)
            except (RedisError, OSError, TimeoutError) as exc:
                logger.info("queuegate: the subscription to changes lost (%s); Redis decides meanwhile", exc)
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
        sent = self._sent
        last = time.monotonic()  # when the latest ping went out, answered or not
        sent.append((last, []))
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
                    at, waiters = sent.popleft()
                    if self._enabled:
                        self.fresh_until = at + LEASE
                    for answered in waiters:
                        if not answered.done():
                            answered.set_result(None)
                elif kind == "psubscribe":
                    raise ConnectionError("redis-py subscribed again on a new connection")
            if sent and now - sent[0][0] > DEAD_AFTER:
                raise TimeoutError(f"no answer to a ping in {DEAD_AFTER} s")
            if now - last >= PING_EVERY or self._unsent:
                last = now
                sent.append((now, self._unsent))
                self._unsent = []
                await pubsub.ping()

    def _heard(self, channel: bytes, data: bytes) -> None:
        name = channel.decode()
        if name.endswith("}:moved"):
            room = name[self._prefix_length : -len("}:moved")]
            self.moved(room)  # before the wake-ups: their checks see the new version
            for listener in self.on_moved:
                try:
                    listener(room, data)
                except Exception:  # one listener's bug must not end the subscription
                    logger.exception("queuegate: a listener failed on room %r's move", room)
            return
        room = name[self._prefix_length : -len("}:revoked")]
        visitor, _, at = data.decode().rpartition(":")
        if visitor == "*":
            self.moved(room)
        self._on_revoke(room, visitor, int(at))

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop([task])
        self._lost()
