"""The decision for one request to a gated room: forward it (an
:class:`Admission` in the scope, maybe a new cookie) or answer it (the
waiting page, a message, a refusal). Redis decides; an admitted visitor's
next requests are decided from this process's copy of Redis's answer
(``queuegate.admissions``); when Redis does not answer, the visitor's
signed cookie and the room's fail mode do. The gate (``queuegate.gate``)
asks for every gated request, and so do route-bound gating
(``queuegate.integrations``) and the join endpoint.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from starlette.types import Scope

from .challenges import Proof
from .endpoints import wants_json
from .pages import Headers, Page
from .settings import Room
from .store import Outcome, StoreError
from .tokens import new_visitor_id
from .visitors import Visitor

if TYPE_CHECKING:
    from .gate import QueueGate
    from .rooms import Rooms

__all__ = ["PASS_LAG_MS", "Admission", "Decisions", "admission"]

logger = logging.getLogger("queuegate")

FAILURE_LOG_INTERVAL = 10.0  # seconds; one log line per burst of Redis failures
LIMITED_LOG_INTERVAL = 60.0  # seconds; one log line a minute at most for new places the client limit refused
# A sliding session's end moves on with each request: the end carried in the
# cookie (for outages) is renewed when it lags by more than this, so an
# admitted visitor gets a new cookie at most once a minute.
PASS_LAG_MS = 60_000
# A waiting visitor's cookie says when their liveness was last recorded; a
# poll renews it when it recorded liveness this much later (queuegate.farback
# records far-back liveness at most every third of `abandon`, less a poll).
SEEN_RENEW_MS = 10_000


class _Gate(Protocol):
    """What an :class:`Admission` needs of the ``QueueGate`` that made it.
    Not the class itself: a build compiled with mypyc puts a dataclass's
    field types in its ``__annotations__`` on import, before
    ``queuegate.gate`` (which imports this module) has made ``QueueGate``,
    and the import crashed (mypyc/mypyc#1209)."""

    @property
    def rooms(self) -> Rooms: ...


@dataclass(slots=True)
class Admission:
    """Put in ``scope["queuegate"]`` for a request the gate let through."""

    room: str
    visitor: str
    expires_ms: int
    gate: _Gate = field(repr=False)

    async def release(self) -> bool:
        """The protected action is done: free this visitor's slot at once."""
        return await self.gate.rooms[self.room].release(self.visitor)


def admission(request: Any) -> Admission | None:
    """The admission of a request (a Starlette ``Request`` or an ASGI scope),
    or ``None`` when the path is not gated or the store failed open."""
    scope = getattr(request, "scope", request)
    found = scope.get("queuegate") if isinstance(scope, Mapping) else None
    return found if isinstance(found, Admission) else None


def _pass_lags(carried_ms: int, until_ms: int) -> bool:
    """Whether the admission's end a cookie carries must be renewed: it is
    past the admission's (a session cut short) or lags it too far."""
    return carried_ms > until_ms or until_ms - carried_ms > PASS_LAG_MS


class Throttle:
    """Says yes at most once every ``seconds``: a warning that would
    otherwise be logged for every request of a burst."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last: float | None = None

    def due(self) -> bool:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.seconds:
            return False
        self._last = now
        return True


class Decisions:
    """The gate's decisions, made with its parts (its store, its visitors'
    cookies, its answers); counts failures in the gate's counters."""

    def __init__(self, gate: QueueGate) -> None:
        self.gate = gate
        self._failure_log = Throttle(FAILURE_LOG_INTERVAL)
        self._limited_log = Throttle(LIMITED_LOG_INTERVAL)

    def store_failed(self, room: Room, exc: StoreError) -> None:
        """Redis did not answer: count it, and log it once per burst."""
        self.gate.counters["failed_open" if room.fail == "open" else "failed_closed"] += 1
        if self._failure_log.due():
            logger.warning(
                "queuegate: Redis did not answer for room %r (%s); failing %s (%s)",
                room.name,
                exc,
                room.fail,
                "requests go on to the app ungated"
                if room.fail == "open"
                else "a 503 page, but for visitors admitted before",
            )

    def _said_limited(self, room: Room, scope: Scope) -> None:
        """A new place refused by the client limit (429): said in the log
        once a minute at most, with the address, since behind a proxy the
        gate does not trust every visitor is one address and most of a
        crowd is turned away (the count is the room's ``limited``)."""
        if not self._limited_log.due():
            return
        logger.warning(
            "queuegate: room %r refused a new place to %s, past its client_limit of new places a minute "
            "from one address (429; counted in the room's `limited`). If many visitors share that address, "
            "it is a proxy the gate does not trust: list it in trusted_proxies (docs: Troubleshooting, "
            "a 429 for many visitors at once); this is said once a minute at most",
            room.name,
            self.gate.client_address(scope),
        )

    async def decide(
        self,
        room: Room,
        scope: Scope,
        *,
        join: bool = True,
        proof: Proof | None = None,
        as_json: bool | None = None,
    ) -> tuple[Page | None, Headers]:
        """Whether a request may reach the app: ``(None, headers)`` to forward
        it (adding ``headers`` to the response; ``scope["queuegate"]`` is its
        :class:`Admission` unless the store failed open), else the gate's
        answer and its headers. ``join=False``: a visitor with no place is
        refused instead of joining the line (websockets). ``proof`` pays for
        a new place where the room asks a proof of work (the join endpoint)."""
        # Most requests to a gated page come from admitted visitors.
        copied = self.copied_admission(room, scope)
        if copied is not None:
            scope["queuegate"] = copied
            return None, []
        return await self.ask(room, scope, join=join, proof=proof, as_json=as_json)

    async def ask(
        self,
        room: Room,
        scope: Scope,
        *,
        join: bool = True,
        proof: Proof | None = None,
        as_json: bool | None = None,
    ) -> tuple[Page | None, Headers]:
        """:meth:`decide` for a request whose admission this process holds
        no copy of (:meth:`copied_admission` said ``None``): asks Redis."""
        if as_json is None:
            as_json = wants_json(scope)
        if room.placeholders:  # a template whose `accept` refused the values
            return self.gate.answers.message("not_found", room, scope, 404, as_json), []
        who = await self.gate.visitors.read(room, scope)
        if who.refused:
            return self.gate.answers.refused(room, scope, as_json)
        asked = who.visitor or new_visitor_id()
        try:
            outcome = await self.gate.store.enter(
                room,
                asked,
                join=join,
                user_hash=who.user_hash,
                user_ttl=self.gate.settings.cookie_max_age,
                client=self.gate.client_address(scope) if room.client_limit else "",
                proof=proof,
                place=who.place,
                seen_ms=who.seen_ms,
                new=who.visitor is None,
            )
        except StoreError as exc:
            self.store_failed(room, exc)
            return self._without_store(room, scope, who, as_json)
        return self._answer(room, scope, who, asked, outcome, as_json)

    def _without_store(
        self, room: Room, scope: Scope, who: Visitor, as_json: bool
    ) -> tuple[Page | None, Headers]:
        """Redis did not answer. A visitor whose cookie carries an admission
        that has not ended yet (by Redis's clock as last seen) passes, so an
        outage throws nobody out mid-checkout; nothing can be released or
        renewed meanwhile; but not one this process heard was ended early
        (a leave, a release, a remove) after that admission began (a
        session's length before its end: a cookie kept after leaving passed
        for the rest of its session). Others get the room's fail mode."""
        if room.fail == "open":
            return None, []
        if who.visitor is not None and self.admitted_in_outage(room, who):
            self.gate.counters["outage_passed"] += 1
            scope["queuegate"] = Admission(room.name, who.visitor, who.until_ms, self.gate)
            return None, []
        return self.gate.answers.unavailable(room, scope, as_json), []

    def admitted_in_outage(self, room: Room, who: Visitor) -> bool:
        """Whether ``who`` passes while Redis does not answer: their cookie
        carries an admission not ended yet, and this process did not hear
        it end early (an end heard after it began: a session, the room's
        from code, before its end)."""
        if who.visitor is None or who.until_ms <= self.gate.store.redis_now_ms():
            return False
        ended = self.gate.store.admissions.ended_at(room.name, who.visitor)
        return ended is None or who.until_ms - room.session * 1000 > ended

    def cookie(self, scope: Scope, room: Room, who: Visitor, asked: str, outcome: Outcome) -> Headers:
        """The room's cookie for ``outcome``, the answer to ``who`` asking as
        ``asked``, when it must be set or renewed; else none."""
        # A new place in line, a place taken over from another device, or a
        # newly signed-in user: a new cookie, whose age counts from now.
        renew = who.visitor is None or outcome.joined or outcome.visitor != asked or who.unbound
        state = outcome.state
        until = place = seen = 0
        if state == "waiting":
            # The cookie carries the place and when liveness was last
            # recorded, for polls answered from a view of the line
            # (queuegate.farback): set with the place, renewed when a poll
            # recorded liveness well after it.
            place, seen = outcome.place, outcome.seen_ms
            renew = renew or place != who.place or seen - who.seen_ms >= SEEN_RENEW_MS
        elif state == "active":
            # The cookie carries the admission's end, for outages (see
            # _without_store): set at admission, renewed as it slides.
            until = outcome.expires_ms
            renew = renew or _pass_lags(who.until_ms, until)
        if not renew:
            return []
        visitors = self.gate.visitors
        return [
            visitors.set_cookie(scope, room, outcome.visitor, who.user_hash, until, who.binding, place, seen)
        ]

    def _answer(
        self, room: Room, scope: Scope, who: Visitor, asked: str, outcome: Outcome, as_json: bool
    ) -> tuple[Page | None, Headers]:
        cookie = self.cookie(scope, room, who, asked, outcome)
        state = outcome.state
        if state == "active" or state == "pass":
            scope["queuegate"] = Admission(room.name, outcome.visitor, outcome.expires_ms, self.gate)
            return None, cookie
        if state == "waiting" or state == "prequeue":
            # A new place for one whose cookie held another: they lost it
            # (skipped as gone, removed, the line drained) and are told so.
            rejoined = outcome.joined and who.place > 0
            return self.gate.answers.line_page(room, outcome, as_json, scope, rejoined=rejoined), cookie
        if state == "challenge":
            return self.gate.answers.challenge(room, outcome, scope, as_json), []
        if state == "limited":
            self._said_limited(room, scope)
            retry = max(1, math.ceil(outcome.eta_ms / 1000))
            return self.gate.answers.message("limited", room, scope, 429, as_json, retry), []
        if state == "none":  # no place, and this request may not take one (a websocket)
            return self.gate.answers.message("not_admitted", room, scope, 403, as_json), []
        # One who holds a place is told it is kept (the page comes back to
        # it if the room opens again), not to come back later; the script
        # says when to ask again (for one in line, within `abandon`).
        kind = "closed_in_line" if outcome.in_line else "closed"
        retry = max(1, math.ceil(outcome.poll_ms / 1000))
        status = self.gate.settings.waiting_status
        return self.gate.answers.message(kind, room, scope, status, as_json, retry), []

    def copied_admission(self, room: Room, scope: Scope) -> Admission | None:
        """The admission :meth:`decide` would find for an anonymous visitor
        whose admission this process holds a coherent copy of (see
        ``queuegate.admissions``) and whose cookie needs nothing renewed,
        found without building what a full decision needs; else ``None``."""
        if room.placeholders:
            return None
        found = self.gate.visitors.anonymous(room, scope)
        if found is None:
            return None
        until = self.gate.store.admissions.admitted_until(room.name, found.visitor)
        if until is None:
            return None
        carried = found.until_ms
        if carried > until or until - carried > PASS_LAG_MS:  # _pass_lags, without a call's 900 instructions
            return None
        return Admission(room.name, found.visitor, until, self.gate)
