"""Newcomers joining a settled room, sent to Redis together.

A newcomer's join through ``enter`` is a script call of its own: about
25 µs of Redis, of which the call itself, the clock, the room's snapshot,
the arrival counter, the line's length and the analytics counters are the
same for every join of the moment. Joins that reach this process together
go in one call instead (``join.lua``, by the
rule of ``newcomers.lua`` that enter's quick join uses too): the shared
part is paid once, and each join adds its place, its liveness and its
client's count. Answers are what the same joins would get one by one, in
the order they arrived (``tests/test_joins.py`` runs both in lockstep).

Nothing waits for a batch to fill: a join is sent at the end of the loop
turn it arrived in, or, while a call of the room's is in flight, when that
call comes back, and never more than ``MAX_WAIT`` (1 ms) later. Only joins of visitors
Redis has never seen (a fresh random id, no user, no proof of work) come
here; a room that is not settled (anyone could be let in now, before an
opening, a proof of work asked) answers none of them and they take the
full call; the room is then not asked again for ``UNSETTLED_BACKOFF``
seconds, so a room letting people straight in pays that round trip at
most once per interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Joins"]

MAX_BATCH = 100  # joins in one call
MAX_WAIT = 0.001  # seconds a join waits for the room's call in flight before going on its own
UNSETTLED_BACKOFF = 0.05  # seconds joins to an unsettled room go straight to the full call

Send = Callable[[Any, Sequence[tuple[str, str]]], Awaitable[Sequence[Any] | None]]


@dataclass
class _Batch:
    room: Any
    joins: list[tuple[str, str]] = field(default_factory=list)
    waiters: list[asyncio.Future[Any]] = field(default_factory=list)


class Joins:
    """One process's joins waiting for the end of the loop turn, per room.

    ``send(room, joins)`` asks Redis (``Store.join_many``) and returns the
    answers to the first joins, in order, or ``None`` when the room is not
    settled."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._batches: dict[str, _Batch] = {}
        self._in_flight: dict[str, int] = {}  # room -> calls sent and not answered
        self._unsettled: dict[str, float] = {}  # room -> loop time until which it is not asked
        self._sending: set[asyncio.Task[None]] = set()
        self.answered = 0  # joins answered by a shared call

    async def join(self, room: Any, visitor: str, client: str) -> Any | None:
        """The answer to ``visitor``'s join, or ``None``: the full call's to give."""
        name = room.name
        loop = asyncio.get_running_loop()
        until = self._unsettled.get(name)
        if until is not None:
            if loop.time() < until:
                return None
            del self._unsettled[name]
        batch = self._batches.get(name)
        if batch is None:
            batch = self._batches[name] = _Batch(room)
            if self._in_flight.get(name):
                loop.call_later(MAX_WAIT, self._flush, name, batch)
            else:
                loop.call_soon(self._flush, name, batch)
        waiter: asyncio.Future[Any] = loop.create_future()
        batch.joins.append((visitor, client))
        batch.waiters.append(waiter)
        if len(batch.joins) >= MAX_BATCH:
            self._flush(name, batch)
        return await waiter

    def _flush(self, name: str, batch: _Batch) -> None:
        if self._batches.get(name) is not batch:
            return  # sent already (it filled up)
        del self._batches[name]
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        task = asyncio.ensure_future(self._run(name, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _run(self, name: str, batch: _Batch) -> None:
        try:
            answers = await self._send(batch.room, batch.joins)
        except BaseException as exc:
            self._answered(name)
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._answered(name)
        if answers is None:
            self._unsettled[name] = asyncio.get_running_loop().time() + UNSETTLED_BACKOFF
            answers = ()
        self.answered += len(answers)
        for i, waiter in enumerate(batch.waiters):
            if not waiter.done():
                waiter.set_result(answers[i] if i < len(answers) else None)

    def _answered(self, name: str) -> None:
        """A call of the room's came back: joins waiting for it go now."""
        left = self._in_flight[name] - 1
        if left:
            self._in_flight[name] = left
        else:
            del self._in_flight[name]
        batch = self._batches.get(name)
        if batch is not None:
            self._flush(name, batch)

    async def aclose(self) -> None:
        for task in self._sending:
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)
