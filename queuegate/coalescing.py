"""Requests that need the same kind of Redis call at about the same moment,
sent as one call.

Newcomers' joins (``queuegate.joins``) and far-back check-ins
(``queuegate.farback``) share their call among the requests of a room that
reach the process together, without waiting for a batch to fill: the items
of a key (a room) go at the end of the loop turn the first of them arrived
in or, while a call of that key is in flight, when it comes back, and never
more than ``max_wait`` later; ``max_batch`` at most a call. An item asked
twice before its call goes shares one answer.

With ``busy_within``, a key is busy while its batches open less than that
apart: then a new batch waits ``max_wait`` for companions even with no
call in flight, nor goes when a call in flight comes back (a fast reply
would send it alone). An event loop with time to spare answers each
request in a turn of its own, so a steady stream of arrivals (a paced
storm of joins) would otherwise go one call each; the first item after a
quiet spell still goes at the end of its turn. With ``linger_gaps`` too,
that wait is so many of the key's mean gaps between its items (a steady
stream gathers about that many a call), at least ``max_wait`` and at most
``max_linger``: a paced stream of one item a millisecond waited 1 ms and
went 1.3-1.6 a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .tasks import stop

__all__ = ["KEEP_KEYS", "Coalescer"]

Item = TypeVar("Item", bound=Hashable)
# The weight of an item's gap from the one before in its key's mean gap.
GAP_WEIGHT = 0.1
# Keys' storm figures kept (a room each; rooms from a URL are as many as
# their values): past this many, those of keys quiet for FORGET_S go.
KEEP_KEYS = 1024
FORGET_S = 1.0
Result = TypeVar("Result")


@dataclass
class _Batch(Generic[Item, Result]):
    context: Any  # what the call needs besides the items (the room)
    # Each item's callers, a future each: one caller giving up (its future
    # cancelled) leaves the others' answers alone.
    waiters: dict[Item, list[asyncio.Future[Result]]] = field(default_factory=dict)
    lingers: bool = False  # opened while its key was busy: it goes after max_wait, not sooner


class Coalescer(Generic[Item, Result]):
    """``send(context, items)`` makes one call for ``items`` and returns
    their results, in order; its failure is every item's."""

    def __init__(
        self,
        send: Callable[[Any, list[Item]], Awaitable[Sequence[Result]]],
        max_wait: float,
        max_batch: int,
        busy_within: float = 0.0,
        linger_gaps: float = 0.0,
        max_linger: float = 0.0,
    ) -> None:
        self._send = send
        self.max_wait = max_wait
        self.max_batch = max_batch
        self.busy_within = busy_within
        self.linger_gaps = linger_gaps
        self.max_linger = max(max_linger, max_wait)
        self._opened: dict[str, float] = {}  # key -> loop time its last batch opened (busy_within > 0)
        # key -> (loop time of its last item, the mean gap between its items), with linger_gaps
        self._gaps: dict[str, tuple[float, float]] = {}
        self._batches: dict[str, _Batch[Item, Result]] = {}
        self._in_flight: dict[str, int] = {}  # key -> calls sent and not answered
        self._sending: set[asyncio.Task[None]] = set()
        self._sweep_at = KEEP_KEYS

    def add(self, key: str, context: Any, item: Item) -> asyncio.Future[Result]:
        """``item``'s result, from the next call of ``key``: a future to await
        (from a running event loop; not a coroutine, which would cost every
        item an await level on its way in and back)."""
        loop = asyncio.get_running_loop()
        wait = self.max_wait
        if len(self._gaps) > self._sweep_at or len(self._opened) > self._sweep_at:
            self._forget_quiet(loop.time())
        if self.linger_gaps and self.busy_within:
            # A gap longer than busy_within counts as busy_within: a storm
            # after a quiet spell is measured within a few items.
            now = loop.time()
            last, gap = self._gaps.get(key, (now - self.busy_within, self.busy_within))
            gap += GAP_WEIGHT * (min(now - last, self.busy_within) - gap)
            self._gaps[key] = (now, gap)
            wait = min(self.max_linger, max(wait, self.linger_gaps * gap))
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = _Batch(context)
            busy = False
            if self.busy_within:
                now = loop.time()
                busy = now - self._opened.get(key, -self.busy_within) < self.busy_within
                self._opened[key] = now
            batch.lingers = busy
            if busy:
                loop.call_later(wait, self._flush, key, batch)
            elif self._in_flight.get(key):
                loop.call_later(self.max_wait, self._flush, key, batch)
            else:
                loop.call_soon(self._flush, key, batch)
        waiter: asyncio.Future[Result] = loop.create_future()
        callers = batch.waiters.get(item)
        if callers is None:
            batch.waiters[item] = [waiter]
            if len(batch.waiters) >= self.max_batch:
                self._flush(key, batch)
        else:
            callers.append(waiter)
        return waiter

    def _forget_quiet(self, now: float) -> None:
        """Drop the storm figures of keys quiet for FORGET_S (such a key's
        next item reads as the first after a quiet spell, as it about does
        with them), so that they stay about as many as the keys of the last
        second."""
        self._opened = {key: at for key, at in self._opened.items() if now - at < FORGET_S}
        self._gaps = {key: gap for key, gap in self._gaps.items() if now - gap[0] < FORGET_S}
        self._sweep_at = max(KEEP_KEYS, 2 * max(len(self._opened), len(self._gaps)))

    def _flush(self, key: str, batch: _Batch[Item, Result]) -> None:
        if self._batches.get(key) is not batch:
            return  # sent already (it filled up, or the call before it came back)
        del self._batches[key]
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        task = asyncio.ensure_future(self._run(key, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _run(self, key: str, batch: _Batch[Item, Result]) -> None:
        waiters = batch.waiters
        try:
            results = await self._send(batch.context, list(waiters))
        except BaseException as exc:
            self._answered(key)
            for callers in waiters.values():
                for waiter in callers:
                    if not waiter.done():
                        waiter.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._answered(key)
        for callers, result in zip(waiters.values(), results, strict=True):
            for waiter in callers:
                if not waiter.done():
                    waiter.set_result(result)

    def _answered(self, key: str) -> None:
        """A call of ``key`` came back: the items waiting for it go now."""
        left = self._in_flight[key] - 1
        if left:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]
        batch = self._batches.get(key)
        if batch is not None and not batch.lingers:
            self._flush(key, batch)

    async def aclose(self) -> None:
        await stop(self._sending)
