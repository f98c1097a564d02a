"""Polls of waiting visitors answered from a view of the line.

A poll of a waiting visitor costs Redis a script call (``quick.lua``: their
rank, the line's length, their liveness), about 15 µs. Ten million waiting,
polling every 20 s, would be 500,000 such calls a second on the one core
that holds the room. Far from the front nothing a poll says needs to be
exact to the visitor:

- **Their place** comes from a *view* of the line (``view.lua``): the
  arrival numbers at ranks 0.5 % apart, from the first rank the line cannot
  reach while the view is in use (200 times what it can let in meanwhile).
  The visitor's cookie holds their arrival number; the rank between the two
  samples around it is within 1 % of the true rank, and so is the estimate
  the scripts computed for that rank. One view a room is built at most
  every ``max_age / 2`` (by whichever process asks first; the others get
  the stored copy), and a process answers from it for ``max_age``.
- **Their liveness** (the proof that they still poll, which decides at the
  front whether they are skipped as gone) is recorded by ``checkin.lua``
  for many visitors in one call, in a hash where an update costs O(1)
  (``liveness.lua``), and only as often as the rule that counts silent
  visitors needs: the view says how long a visitor's last recorded poll may
  be left to age (``record_after``), and the cookie says when it was last
  recorded. A check-in also tells whether the visitor is still in the line;
  one who is not (removed, admitted) is answered by the full call.

Nearer the front the rank is exact: two plain commands sent together ask
Redis whether the room's snapshot holds (``quick_until`` not reached, the
same settings: quick.lua's own condition, under which nothing moves the
line without a call) and the visitor's rank (``ZRANK``); the estimate and
poll interval for that rank come from the view's front samples (every rank
up to 200, then 0.5 % apart), liveness as far back. A visitor no longer in
the line (admitted, removed), or a room not settled, gets the full call.
At the very front even the rank needs no round trip while the process holds
a coherent copy of the line's first places (``queuegate.fronts``).

The rules stay in the scripts: the view's ranks, estimates and intervals,
and how long liveness may go unrecorded, all come from them; this module
only looks up and interpolates. For a lottery, before an opening, in a
closed room, for an identified user, or when no view fresh enough is at
hand, every poll is the full call as before.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .coalescing import Coalescer
from .tasks import stop

__all__ = ["FarAnswer", "FarBack", "View", "estimate_at"]

logger = logging.getLogger("queuegate")

# Seconds a check-in waits for others to share its call, while one of the
# room's is in flight (see queuegate.coalescing).
BATCH_DELAY = 0.002
MAX_BATCH = 500  # visitors in one check-in call


class FarAnswer(NamedTuple):
    """A far-back visitor's place, as of the view it comes from (a tuple:
    one is made for every such poll, in 3,900 instructions where a frozen
    dataclass took 10,400)."""

    now_ms: int  # Redis time of the answer
    rank: int
    line: int
    eta_ms: int
    poll_ms: int
    seen_ms: int  # when their liveness was last recorded (Redis time)


@dataclass(frozen=True, slots=True)
class View:
    """The line as seen from far back (``view.lua``'s reply)."""

    at_ms: int  # Redis time when it was built
    line: int
    far: int  # the first far rank; -1: no far or front path in this room now
    record_after_ms: int  # how long liveness may go unrecorded; 0 = every poll
    ranks: tuple[int, ...]
    places: tuple[int, ...]  # the arrival numbers at those ranks
    etas: tuple[int, ...]
    polls: tuple[int, ...]
    # Front samples (ranks before `far`) and the far ones: estimate and poll
    # interval by rank, front to back.
    all_ranks: tuple[int, ...] = ()
    all_etas: tuple[int, ...] = ()
    all_polls: tuple[int, ...] = ()

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> View:
        numbers = [int(x) for x in reply]
        at, line, far, record_after, fronts = numbers[:5]
        front, samples = numbers[5 : 5 + 3 * fronts], numbers[5 + 3 * fronts :]
        ranks, etas, polls = samples[0::4], samples[2::4], samples[3::4]
        return cls(
            at,
            line,
            far,
            record_after,
            tuple(ranks),
            tuple(samples[1::4]),
            tuple(etas),
            tuple(polls),
            tuple(front[0::3] + ranks),
            tuple(front[1::3] + etas),
            tuple(front[2::3] + polls),
        )

    def at(self, rank: int) -> tuple[int, int] | None:
        """Estimate and poll interval at ``rank`` (exact at a sample, else
        between its two neighbours'), or ``None`` past the view's last rank."""
        return estimate_at(self.all_ranks, self.all_etas, self.all_polls, rank)

    def spot(self, place: int) -> tuple[int, int, int] | None:
        """Rank, estimate and poll interval of arrival number ``place``, or
        ``None`` when it is not far back in this view (nearer the front,
        newer than the view, or known not to be in the line)."""
        places = self.places
        if not places or place < places[0] or place > places[-1]:
            return None
        i = bisect.bisect_right(places, place) - 1
        if places[i] == place:
            return self.ranks[i], self.etas[i], self.polls[i]
        low, high = self.ranks[i], self.ranks[i + 1]
        if high - low <= 1:
            return None  # both neighbours are samples: this place has left the line
        share = (place - places[i]) / (places[i + 1] - places[i])
        rank = min(high - 1, max(low + 1, low + round(share * (high - low))))
        eta = _between(rank, low, high, self.etas[i], self.etas[i + 1])
        # The shorter interval of the two: never polling later than the page would.
        return rank, eta, min(self.polls[i], self.polls[i + 1])


def estimate_at(
    ranks: Sequence[int], etas: Sequence[int], polls: Sequence[int], rank: int
) -> tuple[int, int] | None:
    """The estimate and poll interval at ``rank`` from the scripts' samples
    by rank (exact at a sample; between two, the estimate in proportion and
    the shorter interval), or ``None`` outside them."""
    if not ranks or rank > ranks[-1] or rank < 0:
        return None
    i = bisect.bisect_right(ranks, rank) - 1
    if ranks[i] == rank:
        return etas[i], polls[i]
    return _between(rank, ranks[i], ranks[i + 1], etas[i], etas[i + 1]), min(polls[i], polls[i + 1])


def _between(rank: int, low: int, high: int, eta_low: int, eta_high: int) -> int:
    """The estimate at ``rank`` between two samples' (none if either has
    none: -1, or the paused room's PAUSED_ETA, as the samples say)."""
    if eta_low < 0 or eta_high < 0:
        return min(eta_low, eta_high)
    return round(eta_low + (rank - low) / (high - low) * (eta_high - eta_low))


class FarBack:
    """One process's views of its rooms' lines and its pending check-ins.

    ``build(room, now)`` calls ``view.lua``; ``check_in(room, visitors, now)``
    calls ``checkin.lua`` and returns the Redis time it recorded and the
    visitors no longer in the line; ``now_ms()`` is Redis's time as this
    process knows it. ``now`` (tests, simulations) asks for a view built for
    that question alone, and checks in at once."""

    def __init__(
        self,
        build: Callable[[Any, int | None], Awaitable[View]],
        check_in: Callable[[Any, Sequence[str], int | None], Awaitable[tuple[int, set[str]]]],
        front_rank: Callable[[Any, str, int | None], Awaitable[int | None]],
        now_ms: Callable[[], int],
        max_age_ms: int,
    ) -> None:
        self._build = build
        self._check_in = check_in
        self._front_rank = front_rank
        self._now_ms = now_ms
        self.max_age_ms = max_age_ms
        self._views: dict[str, View] = {}
        self._building: dict[str, asyncio.Task[None]] = {}
        self._disowned: set[asyncio.Task[None]] = set()  # builds begun before a forget
        # Check-ins of a room that come together share one call.
        self._check_ins: Coalescer[str, int | None] = Coalescer(self._send_check_ins, BATCH_DELAY, MAX_BATCH)
        self.answered = 0  # polls answered here
        self.front_answered = 0  # of which near the front (an exact rank asked of Redis)
        self.checked_in = 0  # visitors whose liveness was recorded in batches

    async def answer(
        self, name: str, room: Any, visitor: str, place: int, seen_ms: int, now: int | None
    ) -> FarAnswer | None:
        """The answer to a poll of ``visitor``, waiting with arrival number
        ``place``, whose liveness was last recorded at ``seen_ms``; ``None``
        when the full call must answer."""
        if now is None:
            now_ms = self._now_ms()
            view = self._fresh_view(name, room, now_ms)
        else:
            now_ms = now
            view = await self._build(room, now)
        if view is None or view.far < 0:
            return None
        found = view.spot(place)
        front = found is None
        if found is None:
            # Nearer the front (or newer than the view): the exact rank, if
            # the room is settled and the visitor still waits.
            rank = await self._front_rank(room, visitor, now)
            at = None if rank is None else view.at(rank)
            if rank is None or at is None:
                return None
            found = rank, *at
        rank, eta, poll = found
        if view.record_after_ms == 0 or now_ms - seen_ms >= view.record_after_ms:
            recorded = await self._record(name, room, visitor, now)
            if recorded is None:
                return None  # not in the line any more: the full call says what happened
            seen_ms = recorded
        self.answered += 1
        self.front_answered += front
        return FarAnswer(now_ms, rank, max(view.line, rank + 1), eta, poll, seen_ms)

    def forget(self, name: str) -> None:
        """Drop the view of a room (its settings changed, or its line), and
        disown a build under way: its view may be of the room before."""
        self._views.pop(name, None)
        building = self._building.pop(name, None)
        if building is not None:
            self._disowned.add(building)

    def _fresh_view(self, name: str, room: Any, now_ms: int) -> View | None:
        view = self._views.get(name)
        age = None if view is None else now_ms - view.at_ms
        if (age is None or age >= self.max_age_ms // 2) and name not in self._building:
            task = asyncio.ensure_future(self._rebuild(name, room))
            self._building[name] = task
        if view is None or age is None or not 0 <= age < self.max_age_ms:
            return None
        return view

    async def _rebuild(self, name: str, room: Any) -> None:
        this = asyncio.current_task()
        try:
            view = await self._build(room, None)
        except Exception as exc:  # the full call answers meanwhile, and says what failed
            logger.debug("queuegate: no view of room %r's line (%s)", name, exc)
        else:
            if self._building.get(name) is this:  # (not disowned by forget)
                self._views[name] = view
        finally:
            if self._building.get(name) is this:
                del self._building[name]
            if this in self._disowned:
                self._disowned.remove(this)

    async def _record(self, name: str, room: Any, visitor: str, now: int | None) -> int | None:
        if now is not None:
            recorded, gone = await self._check_in(room, [visitor], now)
            if visitor in gone:
                return None
            self.checked_in += 1
            return recorded
        return await self._check_ins.add(name, room, visitor)

    async def _send_check_ins(self, room: Any, visitors: list[str]) -> list[int | None]:
        recorded, gone = await self._check_in(room, visitors, None)
        self.checked_in += len(visitors) - len(gone)
        return [None if visitor in gone else recorded for visitor in visitors]

    async def aclose(self) -> None:
        await self._check_ins.aclose()
        await stop([*self._building.values(), *self._disowned])
