"""A Redis that lost its data is said, whether or not anybody waits.

The ticker notices a room whose state was lost when it ticks the room,
that is while somebody waits in it (``queuegate.ticker``). The loss that
matters most is the one no tick sees: a Redis that keeps nothing on disk
restarted empty overnight, before a sale, which sends every setting set
at run time (a pause, a rate, a pin) back to the code's.

So a gate keeps one key of its prefix, ``{prefix}:since``: when its data
was first made (Redis's time, ms), with no expiry, made with ``SET NX`` by
whichever process comes first. From its start, each gate process reads
it every ``CHECK_EVERY`` seconds: gone, or made again with another value
than the one it read before, means the data it knew of is gone (a restart
of a Redis that keeps nothing on disk, ``FLUSHALL``, a failover to an
empty server, the keys deleted). The process logs one warning a loss, and
the key is made again. A restart from disk or a failover to a replica
that has the data keeps the key, and nothing is said. A process that
starts and finds no key says so once, at INFO: a new Redis, or one that
lost its data before this process started, which it cannot tell apart.
A look that fails is tried again ``RETRY`` seconds later (the first after
a restart fails on the connection the restart broke); one that Redis
refuses (an ACL without the key, a replica's ``READONLY``) is said once,
since no loss can be told then. The looks start with the gate's lifespan,
or at its first request where the server runs none (Django's handler,
daphne).

In a Redis Cluster the key lives on one shard: a loss of another shard
alone is not seen here (each room's tick still sees its own while
somebody waits in it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import ResponseError

from .calls import FAILURES
from .pipeline import pack
from .tasks import stop

__all__ = ["CHECK_EVERY", "RETRY", "DataWatch"]

logger = logging.getLogger("queuegate")

CHECK_EVERY = 5.0  # seconds between a process's looks at its prefix's key
RETRY = 0.5  # seconds before a look that failed is made again (at most CHECK_EVERY)

Together = Callable[[str, Sequence[bytes]], Awaitable[list[Any]]]


class DataWatch:
    """One process's look at whether Redis still holds the data it knew.
    ``together(key, commands)`` sends plain commands in one round trip
    (``ScriptCalls.together``); ``now_ms`` is Redis's time as this process
    knows it."""

    def __init__(self, together: Together, prefix: str, now_ms: Callable[[], int]) -> None:
        self._together = together
        self._now_ms = now_ms
        self.prefix = prefix
        self.key = f"{prefix}:since"
        self.known: str | None = None  # the key's value at the last look, None = no look yet
        self.losses = 0  # losses this process found
        self.looks = 0  # looks that Redis answered
        self._refused = ""  # the last refusal said, so that each is said once
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> None:
        """One look: the key made if missing, then read. Redis's failures
        are raised (see ``queuegate.calls.FAILURES``)."""
        made = str(self._now_ms())
        key = self.key
        _, value = await self._together(key, [pack("SET", key, made, "NX"), pack("GET", key)])
        self.looks += 1
        self._refused = ""
        if value is None:  # deleted between the two: the next look sees it
            return
        value = value.decode() if isinstance(value, bytes) else str(value)
        if self.known is None:
            if value == made:
                logger.info(
                    "queuegate: Redis held no data under %r before this process started (a new "
                    "Redis, or one whose data was lost): every room runs on its code's settings",
                    self.prefix,
                )
        elif value != self.known:
            self.losses += 1
            logger.warning(
                "queuegate: Redis lost its data under %r (a restart of a Redis that keeps nothing "
                "on disk, FLUSHALL, a failover to an empty server, or its keys deleted): every "
                "room's line starts empty, and the settings set at run time (rates, pauses, "
                "pins...) are back to the code's; `queuegate list` shows what the rooms run with now",
                self.prefix,
            )
        self.known = value

    @property
    def watching(self) -> bool:
        """Whether the looks go on."""
        return self._task is not None and not self._task.done()

    def start(self, every: float = CHECK_EVERY) -> None:
        """Look now and every ``every`` seconds (once; from a running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(every))

    async def _run(self, every: float) -> None:
        while True:
            after = every
            try:
                await self.check()
            except ResponseError as exc:  # refused, not down: it will not pass by itself
                if str(exc) != self._refused:
                    self._refused = str(exc)
                    logger.warning(
                        "queuegate: Redis refused the look at %r (%s): a loss of its data will not "
                        "be logged until it allows GET and SET on that key",
                        self.key,
                        exc,
                    )
                after = min(every, RETRY)
            except FAILURES as exc:
                logger.debug("queuegate: the look at %r failed (%s)", self.key, exc)
                after = min(every, RETRY)
            except Exception:  # a bug must not end the looks: said, and tried again
                logger.exception("queuegate: the look at %r failed", self.key)
            await asyncio.sleep(after)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop([task])
