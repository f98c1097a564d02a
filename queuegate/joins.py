"""Newcomers joining a settled room, sent to Redis together.

A newcomer's join through ``enter`` is a script call of its own: about
25 µs of Redis, of which the call itself, the clock, the room's snapshot,
the arrival counter, the line's length and the analytics counters are the
same for every join of the moment. Joins that reach this process together
go in one call instead (``join.lua``, by the rule of ``newcomers.lua`` that
enter's quick join uses too): the shared part is paid once, and each join
adds its place, its liveness and its client's count. Answers are what the
same joins would get one by one, in the order they arrived
(``tests/test_joins.py`` runs both in lockstep).

Nothing waits for a batch to fill (``queuegate.coalescing``): a join is
sent at the end of the loop turn it arrived in, or, while a call of the
room's is in flight, when that call comes back, and never more than
``MAX_WAIT`` (1 ms) later. In a storm (the room's batches opening less
than ``BUSY_WITHIN`` apart) a join waits for others even with no call in
flight, ``LINGER_GAPS`` of the room's mean gaps between joins (at least
``MAX_WAIT``, at most ``MAX_LINGER``): a process with time to spare
between requests would otherwise send each newcomer alone (1.3 joins a
call at 1,100 joins a second from 128 connections, against 12 flat out
from 32). Only joins of visitors Redis has never seen (a
fresh random id, no user, no proof of work) come here; a room that is not
settled (anyone could be let in now, before an opening, a proof of work
asked) answers none of them and they take the full call; the room is then
not asked again for ``UNSETTLED_BACKOFF`` seconds, so a room letting people
straight in pays that round trip at most once per interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .coalescing import KEEP_KEYS, Coalescer

__all__ = ["Joins"]

MAX_BATCH = 100  # joins in one call
MAX_WAIT = 0.001  # seconds a join waits for the room's call in flight before going on its own
BUSY_WITHIN = 0.005  # seconds between a room's batches under which it is in a storm
LINGER_GAPS = 3.0  # in a storm, a batch waits this many of the room's mean gaps between joins...
MAX_LINGER = 0.003  # ... this long at most (seconds; the join p99 target is 10 ms)
UNSETTLED_BACKOFF = 0.05  # seconds joins to an unsettled room go straight to the full call

Send = Callable[[Any, Sequence[tuple[str, str]]], Awaitable[Sequence[Any] | None]]


class Joins:
    """One process's newcomers' joins, sent together per room.

    ``send(room, joins)`` asks Redis (``Store.join_many``) and returns the
    answers, in order, or ``None`` when the room is not settled (a join
    left without an answer takes the full call too)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._calls: Coalescer[tuple[str, str], Any | None] = Coalescer(
            self._call, MAX_WAIT, MAX_BATCH, BUSY_WITHIN, LINGER_GAPS, MAX_LINGER
        )
        self._unsettled: dict[str, float] = {}  # room -> loop time until which it is not asked
        # What batching did (the speed benchmark prints them): joins answered
        # by a shared call, the shared calls made, and joins sent on to the
        # full call because the room was not settled.
        self.answered = 0
        self.calls = 0
        self.unsettled = 0

    def join(self, room: Any, visitor: str, client: str) -> Awaitable[Any | None]:
        """The answer to ``visitor``'s join, or ``None``: the full call's to
        give. The coalescer's future itself, no coroutine between: each
        await level costs a join on its way in and again on its way back."""
        name = room.name
        until = self._unsettled.get(name)
        if until is not None:
            loop = asyncio.get_running_loop()
            if loop.time() < until:
                self.unsettled += 1
                answer: asyncio.Future[Any | None] = loop.create_future()
                answer.set_result(None)
                return answer
            del self._unsettled[name]
        return self._calls.add(name, room, (visitor, client))

    async def _call(self, room: Any, joins: list[tuple[str, str]]) -> list[Any | None]:
        answers = await self._send(room, joins)
        self.calls += 1
        if answers is None:
            self.unsettled += len(joins)
            now = asyncio.get_running_loop().time()
            if len(self._unsettled) >= KEEP_KEYS:
                # Rooms from a URL are as many as its values: none is kept
                # past its backoff.
                self._unsettled = {other: at for other, at in self._unsettled.items() if at > now}
            self._unsettled[room.name] = now + UNSETTLED_BACKOFF
            answers = ()
        self.answered += len(answers)
        return [answers[i] if i < len(answers) else None for i in range(len(joins))]

    async def aclose(self) -> None:
        await self._calls.aclose()
