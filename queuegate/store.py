"""The line in Redis: one Lua script call per operation.

The rules of the line live in ``scripts/*.lua``; this module only names the
operations, passes their arguments and turns replies into Python values (a
visitor's answer by ``queuegate.outcomes``); ``queuegate.calls`` puts the
calls on the wire. Every script that can move the line runs
``advance.lua`` first, which brings the room up to date; between calls,
``queuegate.ticker`` moves each room somebody waits in at its refills.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .admissions import LocalAdmissions
from .calls import FAILURES, RoomRef, ScriptCalls, StoreError, UnknownRoom
from .challenges import Proof
from .connections import Client, connect, redacted
from .dataloss import DataWatch
from .farback import FarBack, View
from .fronts import FRONT_PLACES, FrontCopies
from .invalidations import Invalidations
from .joins import Joins
from .operations import Operations
from .outcomes import Outcome, decode, decode_joins, text, waiting
from .pipeline import pack
from .settings import Room
from .stats import decode_stats
from .ticker import Tick, Ticker

# connect, redacted and Client live in queuegate.connections, StoreError and
# UnknownRoom in queuegate.calls; named here too, where callers have always
# imported them from.
__all__ = [
    "Client",
    "Outcome",
    "RoomRef",
    "Store",
    "StoreError",
    "UnknownRoom",
    "connect",
    "operator_name",
    "redacted",
]

FAR_FROM = 1000  # visitors at this rank or further back may be answered from a view
FAR_MAX_AGE_MS = 500  # how long a process answers far-back polls from one view
# A front poll's answer without a script stops this long (ms) before the
# room's snapshot ends: this process's idea of Redis's time may lag a little.
SETTLED_MARGIN_MS = 10


def operator_name(source: str) -> str:
    """Who changes rooms from this process, for their activity log:
    ``source`` with the system user and host, ``console (ada@ops-1)``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name in some containers
        user = f"uid {os.getuid()}"
    return f"{source} ({user}@{socket.gethostname()})"


class Store(Operations):
    """The rooms' state in one Redis (or cluster) under ``prefix``.

    Each operation is a call to a room script (see ``queuegate.calls``:
    one automatically pipelined connection per server), or reads of the
    copies Redis keeps coherent in this process.

    Operators' changes (``configure``, ``drain``, ``forget``, ``release``
    and ``leave``) are ``queuegate.operations``'s, and their reads that
    move nothing (the activity log, the seed, the first visitors,
    analytics, room names) ``queuegate.readings``'s.
    """

    def __init__(
        self,
        client: Client,
        prefix: str = "qg",
        timeout: float = 5.0,
        *,
        local_admissions: bool = True,
        far_from: int | None = FAR_FROM,
        actor: str | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.timeout = timeout
        self.actor = actor or operator_name(f"code, pid {os.getpid()}")
        # The calls to the room scripts, and Redis's time as their replies
        # teach it.
        self.calls = ScriptCalls(client, prefix, timeout)
        self._call = self.calls.call
        self.clock = self.calls.clock
        self.redis_now_ms = self.clock.now_ms
        self._keys = self.calls.keys
        self._base = self.calls.base
        # Polls of visitors far from the front, answered from a view of the
        # line (see queuegate.farback); far_from=None: every poll asks Redis.
        self.far_from = far_from
        self.far_back = FarBack(self.view, self.check_in, self.front_rank, self.redis_now_ms, FAR_MAX_AGE_MS)
        # What Redis says changed (one subscription, under a lease), and the
        # copies it keeps coherent: admissions this process was told of (a
        # room's new settings drop its view of the line too), and the first
        # places of each room's line (polls near the front, no round trip).
        self.invalidations = Invalidations(
            client,
            prefix,
            enabled=local_admissions,
            on_revoke=self._revoked,
            on_lost=lambda: self.admissions.clear(),
        )
        self.admissions = LocalAdmissions(
            self.invalidations, self.redis_now_ms, on_reset=self.far_back.forget
        )
        self.fronts = FrontCopies()
        # Newcomers' joins of one loop turn, sent in one call.
        self.joins = Joins(self.join_many)
        # The rooms somebody waits in move on time (queuegate.ticker).
        self.ticker = Ticker(self.tick, lambda room: self.admissions.revoke(room, "*", self.redis_now_ms()))
        # Redis's data lost while nobody waits (no tick sees it): said by a
        # gate's processes from their start (queuegate.dataloss).
        self.data_watch = DataWatch(self.calls.together, prefix, self.redis_now_ms)

    def _revoked(self, room: str, visitor: str, at_ms: int) -> None:
        self.admissions.revoke(room, visitor, at_ms)
        if visitor == "*":  # new settings: the room may move at other moments now
            self.ticker.poke(room)

    def keys(self, room: str) -> tuple[str, ...]:
        """The room's keys: seq, waiting, seen, active, state (made once per room)."""
        return self._keys(room)

    async def enter(
        self,
        room: RoomRef,
        visitor: str,
        *,
        join: bool = True,
        user_hash: str | None = None,
        user_ttl: float = 86400.0,
        client: str = "",
        proof: Proof | None = None,
        place: int = 0,
        seen_ms: int = 0,
        new: bool = False,
        now: int | None = None,
    ) -> Outcome:
        """A request from ``visitor``: pass, wait (joining if new), or closed.

        ``user_hash`` (see ``Tokens.user_hash``) makes the place the user's:
        the same user from another device gets the same place. ``client`` is
        the client's address, for the room's ``client_limit``. ``proof``, a
        checked proof of work, pays for a new place where the room asks one
        (and is spent if it does). ``place`` and ``seen_ms``, from the
        visitor's cookie (the arrival number and last recorded liveness of
        an earlier answer), let a poll from far back be answered without a
        call (see ``queuegate.farback``). ``new``: ``visitor`` is a fresh
        random id Redis has never seen; its join may share a call with
        others (see ``queuegate.joins``)."""
        name = room if isinstance(room, str) else room.name
        if new and join and user_hash is None and proof is None and now is None and not isinstance(room, str):
            joined = await self.joins.join(room, visitor, client)
            if joined is not None:  # (the ticker was told by join_many)
                return joined  # type: ignore[no-any-return]
        if user_hash is None and now is None:
            # Admitted, as this process was told, and not revoked since.
            until = self.admissions.admitted_until(name, visitor)
            if until is not None:
                return Outcome("active", self.redis_now_ms(), visitor, expires_ms=until, copyable=True)
            self.invalidations.start()  # once; later calls do nothing
        if place and user_hash is None and self.far_from is not None:
            far = await self.far_back.answer(name, room, visitor, place, seen_ms, now)
            if far is not None:
                return waiting(
                    far.now_ms,
                    visitor,
                    far.rank,
                    far.line,
                    far.eta_ms,
                    far.poll_ms,
                    False,
                    "fifo",
                    place,
                    far.seen_ms,
                )
        base = self._base(name)
        extra: tuple[str, ...] = (base + "client:" + client, base + "user:" + (user_hash or ""))
        ttl = "" if user_hash is None else str(round(user_ttl * 1000))
        args = [visitor, "1" if join else "0", ttl, "1" if client else ""]
        if proof is not None:
            extra = (*extra, base + "proof:" + proof.key)
            args += [str(proof.expires_ms), str(proof.difficulty)]
        sent_at = time.monotonic()
        reply = await self._call("enter", room, now, *args, extra_keys=extra)
        outcome = self._outcome(reply, room, now, sent_at)
        if now is None and (outcome.state == "waiting" or outcome.state == "prequeue"):
            self.ticker.watch(room)
        return outcome

    async def join_many(
        self, room: Room, joins: Sequence[tuple[str, str]], *, now: int | None = None
    ) -> list[Outcome] | None:
        """New visitors join together (join.lua): ``joins`` are (visitor id,
        client address) of visitors Redis has never seen, in arrival order.
        Returns their answers, in order, as ``enter`` would give them one
        by one (newcomers.lua); or ``None`` when the room is not settled:
        then each is for ``enter``."""
        base = self._base(room.name)
        keys = tuple(base + "client:" + client for _, client in joins)
        visitors = [visitor for visitor, _ in joins]
        reply = await self._call("join", room, now, *visitors, extra_keys=keys)
        outcomes = decode_joins(reply, visitors)
        if outcomes and now is None:
            self.clock.learn(outcomes[0].now_ms)
            # Somebody waits: the room is ticked (once a call, not once a join).
            for outcome in outcomes:
                if outcome.state == "waiting":
                    self.ticker.watch(room)
                    break
        return outcomes

    def _outcome(self, reply: Sequence[Any], room: RoomRef, now: int | None, sent_at: float) -> Outcome:
        """An answer of enter.lua as an Outcome; a call that used Redis's
        clock teaches this process the offset, and an admission it may
        copy goes to the local admissions."""
        outcome = decode(reply)
        if now is None:
            self.clock.learn(outcome.now_ms)
            if outcome.copyable:
                name = room if isinstance(room, str) else room.name
                if self.admissions.copy(name, outcome.visitor, outcome.expires_ms, outcome.now_ms, sent_at):
                    # Ticked while the copy may be used: a tick finds a room whose data was lost.
                    self.ticker.watch(room, until=sent_at + (outcome.expires_ms - outcome.now_ms) / 1000)
        return outcome

    async def enter_many(self, room: RoomRef, visitors: Sequence[str], *, now: int | None = None) -> None:
        """Let in or join many visitors at once (load tests, simulations): the
        calls go out together on the pipelined connection."""
        await asyncio.gather(*(self.enter(room, visitor, now=now) for visitor in visitors))

    async def view(self, room: RoomRef, now: int | None = None) -> View:
        """The line as seen from far back (see view.lua and queuegate.farback)."""
        far_from = self.far_from if self.far_from is not None else FAR_FROM
        max_age = FAR_MAX_AGE_MS if now is None else 0  # a view at a given time serves only that time
        reply = await self._call("view", room, now, str(far_from), str(max_age))
        view = View.parse(reply)
        if now is None:
            self.clock.learn(view.at_ms)
        return view

    async def front_rank(self, room: RoomRef, visitor: str, now: int | None = None) -> int | None:
        """The exact rank of ``visitor`` waiting in a settled room: quick.lua's
        question (the room's snapshot holds at ``now``, taken with this room's
        settings, and the visitor is in the line), answered from this
        process's copy of the line's front (``queuegate.fronts``), else asked
        with two plain commands instead of a script. ``None`` when the answer
        is not that simple: the full call answers then."""
        if isinstance(room, str) or not room.defaults:
            return None
        name = room.name
        keys = self._keys(name)
        wanted = self._encoded_defaults(room.defaults)
        version = None
        if now is None:
            version = self.invalidations.line_version(name)
            rank = self.fronts.rank(name, visitor, version, self.redis_now_ms() + SETTLED_MARGIN_MS, wanted)
            if rank is not None:
                return rank
        commands = [self._encoded_settled(keys[4]), pack("ZRANK", keys[1], visitor)]
        if now is None and self.fronts.wants(name, version):
            self.fronts.reading(name)
            commands.append(self._encoded_front(keys[1]))
        try:
            replies = await self.calls.together(keys[0], commands)
        except BaseException as exc:
            if len(commands) > 2:
                self.fronts.gave_up(name)
            if isinstance(exc, FAILURES):
                raise StoreError(f"{type(exc).__name__}: {exc}") from exc
            raise
        (until, defaults), rank = replies[0], replies[1]
        now_ms = self.redis_now_ms() + SETTLED_MARGIN_MS if now is None else now
        settled = until is not None and now_ms < int(until) and defaults == wanted
        if len(commands) > 2:
            if settled:
                heard = self.invalidations.line_version(name)
                self.fronts.read(name, version, heard, int(until), defaults, replies[2])
            else:
                self.fronts.gave_up(name)
        if not settled:
            return None
        return None if rank is None else int(rank)

    @staticmethod
    @lru_cache(maxsize=1000)
    def _encoded_front(line_key: str) -> bytes:
        return pack("ZRANGE", line_key, 0, FRONT_PLACES - 1)

    @staticmethod
    @lru_cache(maxsize=1000)
    def _encoded_settled(state_key: str) -> bytes:
        return pack("HMGET", state_key, "quick_until", "defaults")

    @staticmethod
    @lru_cache(maxsize=100)
    def _encoded_defaults(defaults: str) -> bytes:
        return defaults.encode()

    async def tick(
        self, room: RoomRef, holder: str, lease_ms: int, incarnation: str = "", *, now: int | None = None
    ) -> Tick:
        """Move the room on time if ``holder`` holds (or takes) its ticker's
        lease of ``lease_ms``; if the room's ``incarnation`` is no longer
        the one given, every process drops its copies of it (see tick.lua)."""
        name = room if isinstance(room, str) else room.name
        extra = (self._base(name) + "ticker",)
        reply = await self._call("tick", room, now, holder, str(lease_ms), incarnation, extra_keys=extra)
        held, at, due, waiting = (int(value) for value in reply[:4])
        if now is None:
            self.clock.learn(at)
        return Tick(bool(held), at, due, waiting, text(reply[4]))

    async def check_in(
        self, room: RoomRef, visitors: Sequence[str], now: int | None = None
    ) -> tuple[int, set[str]]:
        """Record that ``visitors`` polled (see checkin.lua): the Redis time
        recorded, and those of them no longer in the line."""
        reply = await self._call("checkin", room, now, *visitors)
        return int(reply[0]), {text(gone) for gone in reply[1:]}

    async def places(
        self, room: RoomRef, visitors: Sequence[str], now: int | None = None
    ) -> tuple[int, str, list[tuple[int, int]]]:
        """Record that ``visitors`` are here, as ``check_in`` does, and read
        where each one stands (places.lua): Redis's time, the room's
        incarnation, and for each visitor in order (rank, 0) while waiting,
        (-1, session end in ms) once admitted, (-1, 0) with no place."""
        reply = await self._call("places", room, now, *visitors)
        numbers = [int(value) for value in reply[2:]]
        return int(reply[0]), text(reply[1]), list(zip(numbers[0::2], numbers[1::2], strict=True))

    async def report(
        self,
        room: RoomRef,
        responses: int,
        errors: int,
        end_buckets: Sequence[int],
        first_byte_buckets: Sequence[int],
        in_flight_buckets: Sequence[int] | None = None,
        started: int | None = None,
        *,
        visits: Sequence[float] | None = None,
        now: int | None = None,
    ) -> tuple[int, str]:
        """One process's measurements of the responses it forwarded for the
        room since its last report, of the requests it has in flight by
        their age so far, and of the requests it started (by default, as
        many as responded; see health.lua), and by the visit's age: for each
        of ``queuegate.health``'s visit buckets, requests started, successful
        responses and their time (ms); runs the room's admission
        controller when a decision is due. Returns the controlled value
        (rate, or capacity) and the controller's last decision."""
        name = room if isinstance(room, str) else room.name
        args = [str(responses), str(errors), *map(str, end_buckets), *map(str, first_byte_buckets)]
        args += map(str, in_flight_buckets or [0] * len(end_buckets))
        args.append(str(responses if started is None else started))
        if visits:
            args += (str(round(v)) for v in visits)
        reply = await self._call("health", room, now, *args, extra_keys=(self._base(name) + "health",))
        return int(reply[0]), text(reply[1])

    async def stats(self, room: RoomRef, *, now: int | None = None) -> dict[str, Any]:
        """Live numbers and effective settings (durations in ms); see stats.lua.
        ``run_time`` lists the settings an operator set at run time, which
        win over the code's; ``controlled`` names the one the admission
        controller holds ("": none); ``code`` has the code's value of each."""
        name = room if isinstance(room, str) else room.name
        reply = await self._call("stats", room, now, extra_keys=(self._base(name) + "health",))
        return decode_stats(reply)

    async def warm(self) -> None:
        """Connect and load the scripts ahead of the first request (see
        ``ScriptCalls.warm``); raises StoreError if Redis does not answer."""
        await self.calls.warm()

    async def aclose(self) -> None:
        await self.data_watch.aclose()
        await self.joins.aclose()
        await self.ticker.aclose()
        await self.far_back.aclose()
        await self.invalidations.aclose()
        await self.calls.aclose()
        await self.client.aclose()
        # A Sentinel-managed client: its connections to the sentinels too.
        manager = getattr(getattr(self.client, "connection_pool", None), "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await sentinel.aclose()
