"""The gate: a pure ASGI middleware in front of the protected paths.

Per request (http or websocket): match a form of the path to a room (see
``paths`` and ``rooms``), skip it if a bypass rule says so, read the room's
signed cookie, make one script call, then forward (active) or answer with
the waiting page or JSON (an http request) or refuse the handshake (a
websocket). The same decision serves route-bound gating (``queuegate.routes``
and the integrations), which runs after the app's router. Everything that can
be prepared is prepared in ``__init__``.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .answers import GATE_KEY, Answers
from .challenges import Challenges, Proof
from .clients import ClientAddresses
from .endpoints import Endpoints, wants_json
from .health import HealthReports
from .pages import Headers, Page, Pages, send_page
from .paths import compile_patterns, forms, route_path
from .rooms import Rooms
from .settings import ConfigError, Room, Settings
from .store import FAR_FROM, Client, Outcome, Store, StoreError, connect
from .tokens import Tokens, new_visitor_id
from .visitors import Identify, Visitor, Visitors

__all__ = ["Admission", "Identify", "QueueGate", "admission"]

logger = logging.getLogger("queuegate")

FAILURE_LOG_INTERVAL = 10.0  # seconds; one log line per burst of Redis failures
BYPASS_HEADER = b"x-queuegate-bypass"
POLICY_VIOLATION = 1008  # websocket close code for a handshake refused before accept
# A sliding session's end moves on with each request: the end carried in the
# cookie (for outages) is renewed when it lags by more than this, so an
# admitted visitor gets a new cookie at most once a minute.
PASS_LAG_MS = 60_000
# A waiting visitor's cookie says when their liveness was last recorded; a
# poll renews it when it recorded liveness this much later (queuegate.farback
# records far-back liveness at most every third of `abandon`, less a poll).
SEEN_RENEW_MS = 10_000
# Headers (a new cookie) route-bound gating asks the gate to add to the app's
# response, and an answer that replaces it (FastAPI's dependency raises).
HEADERS_KEY = "queuegate.headers"
ANSWER_KEY = "queuegate.answer"


@dataclass(slots=True)
class Admission:
    """Put in ``scope["queuegate"]`` for a request the gate let through."""

    room: str
    visitor: str
    expires_ms: int
    gate: QueueGate = field(repr=False)

    async def release(self) -> bool:
        """The protected action is done: free this visitor's slot at once."""
        return await self.gate.rooms[self.room].release(self.visitor)


def admission(request: Any) -> Admission | None:
    """The admission of a request (a Starlette ``Request`` or an ASGI scope),
    or ``None`` when the path is not gated or the store failed open."""
    scope = getattr(request, "scope", request)
    found = scope.get("queuegate") if isinstance(scope, Mapping) else None
    return found if isinstance(found, Admission) else None


def gate_of(scope: Scope) -> tuple[QueueGate, str]:
    """The gate in front of a request, and the root path it saw the request
    at (where its endpoints are); for route-bound gating."""
    found = scope.get(GATE_KEY)
    if found is None:
        raise RuntimeError(
            "queuegate: this route is gated, but no QueueGate middleware is in front of the app "
            "(add app.add_middleware(QueueGate, rooms=[...], ...) or wrap the ASGI app)"
        )
    return found  # type: ignore[no-any-return]


def _pass_lags(carried_ms: int, until_ms: int) -> bool:
    """Whether the admission's end a cookie carries must be renewed: it is
    past the admission's (a session cut short) or lags it too far."""
    return carried_ms > until_ms or until_ms - carried_ms > PASS_LAG_MS


async def _deny_websocket(scope: Scope, receive: Receive, send: Send, page: Page) -> None:
    """Refuse a websocket handshake: with the gate's answer as an HTTP
    response where the server supports it, else a close before accept
    (which servers turn into a 403)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [*page.headers, (b"content-length", str(len(page.body)).encode())]
        await send({"type": "websocket.http.response.start", "status": 403, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": page.body})
    else:
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})


class QueueGate:
    """A virtual waiting room in front of the paths of ``rooms``.

    ``redis`` is a URL (``redis://``, ``rediss://``, ``unix://``) or a
    ``redis.asyncio.Redis`` client. ``identify(request)`` may return the id of
    a signed-in user (or ``None``), so that a user holds one place per room
    across devices. The other options are those of
    :class:`queuegate.settings.Settings`; each one left as ``None`` is read
    from its ``QUEUEGATE_*`` environment variable (``environ`` replaces
    ``os.environ``), else takes its default.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        rooms: Sequence[Room] | None = None,
        secret_key: str | Sequence[str] | None = None,
        redis: str | Client | None = None,
        identify: Identify | None = None,
        waiting_template: str | None = None,
        prefix: str | None = None,
        cookie_secure: bool | None = None,
        cookie_max_age: int | None = None,
        timeout: float | None = None,
        local_admissions: bool | None = None,
        far_back: bool | None = None,
        max_connections: int | None = None,
        waiting_status: int | None = None,
        endpoint: str | None = None,
        bypass_paths: Sequence[str] | None = None,
        bypass_secret: str | None = None,
        bypass_networks: Sequence[str] | None = None,
        trusted_proxies: Sequence[str] | None = None,
        bind_cookie: Sequence[str] | None = None,
        language: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        settings = Settings.load(
            environ,
            secret_key=secret_key,
            rooms=rooms,
            redis_url=redis if isinstance(redis, str) else None,
            prefix=prefix,
            cookie_secure=cookie_secure,
            cookie_max_age=cookie_max_age,
            timeout=timeout,
            local_admissions=local_admissions,
            far_back=far_back,
            max_connections=max_connections,
            waiting_status=waiting_status,
            endpoint=endpoint,
            bypass_paths=bypass_paths,
            bypass_secret=bypass_secret,
            bypass_networks=bypass_networks,
            trusted_proxies=trusted_proxies,
            bind_cookie=bind_cookie,
            language=language,
        )
        if not settings.rooms:
            raise ConfigError("rooms: no room configured; pass rooms=[Room(...)] or set QUEUEGATE_ROOMS")
        if identify is not None and not callable(identify):
            raise ConfigError("identify must be a function of the request, returning a user id or None")
        self._owns_client = not isinstance(redis, (aioredis.Redis, aioredis.RedisCluster))
        if isinstance(redis, (aioredis.Redis, aioredis.RedisCluster)):
            client = redis
        elif settings.redis_url is not None:
            client = connect(settings.redis_url, settings.timeout, settings.max_connections)
        else:
            raise ConfigError(
                "redis is not set: pass redis='redis://host:6379/0' (or a redis.asyncio "
                "client) or set QUEUEGATE_REDIS_URL"
            )
        self.settings = settings
        self.store = Store(
            client,
            settings.prefix,
            settings.timeout,
            local_admissions=settings.local_admissions,
            far_from=FAR_FROM if settings.far_back else None,
        )
        self.rooms = Rooms(settings.rooms, self.store)
        self.tokens = Tokens(settings.secret_keys, settings.cookie_max_age)
        self.client_address = ClientAddresses(settings.trusted_proxies)
        self.visitors = Visitors(
            self.tokens,
            identify,
            settings.cookie_max_age,
            settings.cookie_secure,
            settings.bind_cookie,
            self.client_address.network,
        )
        self.pages = Pages(settings.waiting_status, waiting_template)
        self._bypass_paths = compile_patterns(settings.bypass_paths)
        self._bypass_secret = None if settings.bypass_secret is None else settings.bypass_secret.encode()
        self._bypass_networks = [ipaddress.ip_network(n, strict=False) for n in settings.bypass_networks]
        self._no_bypass = not (self._bypass_paths or self._bypass_secret or self._bypass_networks)
        # Rooms without paths are used on routes: their new cookies (and
        # FastAPI's answers) reach the response through this middleware.
        self.route_bound = any(not room.paths for room in settings.rooms)
        self.counters = {
            "failed_open": 0,
            "failed_closed": 0,
            "refused": 0,
            "bypassed": 0,
            "outage_passed": 0,
        }
        self.challenges = Challenges(settings.secret_keys)
        self.answers = Answers(settings, self.pages, self.visitors, self.counters, self.challenges)
        self.endpoints = Endpoints(self)
        self.health = HealthReports(self.store, settings.rooms)
        # Measure around the whole app: for "app" signals, and for rooms with
        # a target that a dependency or decorator may gate further in.
        self._measure_all = any(room.target is not None for room in settings.rooms)
        self._last_failure_log = 0.0

    # -- routing -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            path = scope["path"]
            root = scope.get("root_path", "")
            scope[GATE_KEY] = (self, root)
            if kind == "http":
                found = self.endpoints.match(route_path(path, root) if root else path)
                if found is not None:
                    await self.endpoints.serve(*found, scope, receive, send)
                    return
            # A websocket handshake is a GET.
            room = self.rooms.match(path, scope.get("method", "GET"), root)
            if room is not None and not self.bypassed(scope):
                await self.gate_request(room, scope, receive, send, self.app)
                return
            if self.route_bound and kind == "http":
                send = self._route_send(scope, send)
            if kind == "http" and self._measure_all:
                await self.health.forward(self.health.app_rooms, self.app, scope, receive, send)
                return
        elif kind == "lifespan" and self._owns_client:
            await self.app(scope, receive, self._closing_send(send))
            return
        await self.app(scope, receive, send)

    def match(self, path: str, method: str = "GET", root_path: str = "") -> Room | None:
        """The room that gates a request for ``path``, if any."""
        return self.rooms.match(path, method, root_path)

    def bypassed(self, scope: Scope) -> bool:
        if self._no_bypass:
            return False
        if self._bypass_rule(scope):
            self.counters["bypassed"] += 1
            return True
        return False

    def _bypass_rule(self, scope: Scope) -> bool:
        """Bypass rules, checked before any Redis call: paths (every form of
        the path must be a bypassed one, so a spelling that also reaches a
        gated page is gated), the secret header, client networks (the client
        address as the server reports it; behind a proxy, let the server
        trust its forwarded-for header)."""
        if self._bypass_paths and all(
            any(p.fullmatch(form) for p in self._bypass_paths)
            for form in forms(scope["path"], scope.get("root_path", ""))
        ):
            return True
        if self._bypass_secret is not None:
            for name, value in scope["headers"]:
                if name == BYPASS_HEADER and hmac.compare_digest(value, self._bypass_secret):
                    return True
        if self._bypass_networks:
            address = self.client_address.peer(scope)
            return address is not None and any(address in network for network in self._bypass_networks)
        return False

    def _closing_send(self, send: Send) -> Send:
        async def closing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.aclose()
            await send(message)

        return closing_send

    async def aclose(self) -> None:
        """Close the gate's connections (its lifespan does, when it owns them)."""
        await self.endpoints.aclose()
        await self.health.aclose()
        await self.store.aclose()

    def _route_send(self, scope: Scope, send: Send) -> Send:
        """Adds the headers route-bound gating left in the scope to the app's
        response, or sends the answer it left instead of the app's."""

        async def route_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = scope.get(ANSWER_KEY)
                if answer is not None:
                    page, headers = answer
                    await send_page(page, send, headers)
                    return
                extra = scope.get(HEADERS_KEY)
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
            elif message["type"] == "http.response.body" and scope.get(ANSWER_KEY) is not None:
                return
            await send(message)

        return route_send

    # -- the decision --------------------------------------------------------

    def store_failed(self, room: Room, exc: StoreError) -> None:
        """Redis did not answer: count it, and log it once per burst."""
        self.counters["failed_open" if room.fail == "open" else "failed_closed"] += 1
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_INTERVAL:
            self._last_failure_log = now
            logger.warning(
                "queuegate: Redis did not answer for room %r (%s); failing %s", room.name, exc, room.fail
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
        if as_json is None:
            as_json = wants_json(scope)
        if room.placeholders:  # a template whose `accept` refused the values
            return self.answers.message("not_found", room, scope, 404, as_json), []
        who = await self.visitors.read(room, scope)
        if who.refused:
            return self.answers.refused(room, scope, as_json)
        asked = who.visitor or new_visitor_id()
        try:
            outcome = await self.store.enter(
                room,
                asked,
                join=join,
                user_hash=who.user_hash,
                user_ttl=self.settings.cookie_max_age,
                client=self.client_address(scope) if room.client_limit else "",
                proof=proof,
                place=who.place,
                seen_ms=who.seen_ms,
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
        renewed meanwhile. Others get the room's fail mode."""
        if room.fail == "open":
            return None, []
        if who.visitor is not None and who.until_ms > self.store.redis_now_ms():
            self.counters["outage_passed"] += 1
            scope["queuegate"] = Admission(room.name, who.visitor, who.until_ms, self)
            return None, []
        return self.answers.unavailable(room, scope, as_json), []

    def _answer(
        self, room: Room, scope: Scope, who: Visitor, asked: str, outcome: Outcome, as_json: bool
    ) -> tuple[Page | None, Headers]:
        # A new place in line, a place taken over from another device, or a
        # newly signed-in user: a new cookie, whose age counts from now.
        renew = who.visitor is None or outcome.joined or outcome.visitor != asked or who.unbound
        state = outcome.state
        until = place = seen = 0
        if state == "waiting":
            # The cookie carries the place and when liveness was last
            # recorded, for far-back polls (queuegate.farback): set with
            # the place, renewed when a poll recorded liveness well after it.
            place, seen = outcome.place, outcome.seen_ms
            renew = renew or place != who.place or seen - who.seen_ms >= SEEN_RENEW_MS
        elif state == "active":
            # The cookie carries the admission's end, for outages (see
            # _without_store): set at admission, renewed as it slides.
            until = outcome.expires_ms
            renew = renew or _pass_lags(who.until_ms, until)
        cookie = (
            [self.visitors.set_cookie(room, outcome.visitor, who.user_hash, until, who.binding, place, seen)]
            if renew
            else []
        )
        if state == "active" or state == "pass":
            scope["queuegate"] = Admission(room.name, outcome.visitor, outcome.expires_ms, self)
            return None, cookie
        if state == "waiting" or state == "prequeue":
            return self.answers.line_page(room, outcome, as_json, scope), cookie
        if state == "challenge":
            return self.answers.challenge(room, outcome, scope, as_json), []
        if state == "limited":
            retry = max(1, math.ceil(outcome.eta_ms / 1000))
            return self.answers.message("limited", room, scope, 429, as_json, retry), []
        if state == "none":  # no place, and this request may not take one (a websocket)
            return self.answers.message("not_admitted", room, scope, 403, as_json), []
        status = self.settings.waiting_status
        return self.answers.message("closed", room, scope, status, as_json, 60), []

    def copied_admission(self, room: Room, scope: Scope) -> Admission | None:
        """The admission :meth:`decide` would find for an anonymous visitor
        whose admission this process holds a coherent copy of (see
        ``queuegate.admissions``) and whose cookie needs nothing renewed,
        found without building what a full decision needs; else ``None``."""
        if room.placeholders:
            return None
        found = self.visitors.anonymous(room, scope)
        if found is None:
            return None
        until = self.store.admissions.admitted_until(room.name, found.visitor)
        if until is None or _pass_lags(found.until_ms, until):
            return None
        return Admission(room.name, found.visitor, until, self)

    async def gate_request(
        self, room: Room, scope: Scope, receive: Receive, send: Send, app: ASGIApp
    ) -> None:
        if scope["type"] == "websocket":
            # Only an admitted visitor connects; a handshake takes no place.
            # An open socket is not closed when the session ends later.
            page, _ = await self.decide(room, scope, join=False)
            if page is None:
                await app(scope, receive, send)
            else:
                await _deny_websocket(scope, receive, send, page)
            return
        page, headers = await self.decide(room, scope)
        if page is None:
            send = self._with_headers(send, headers)
            if self.route_bound:  # another room may be on the route too
                send = self._route_send(scope, send)
            measured = self._measured_for(room)
            if measured:
                await self.health.forward(measured, app, scope, receive, send)
            else:
                await app(scope, receive, send)
        else:
            await send_page(page, send, headers)

    def _measured_for(self, room: Room) -> tuple[Room, ...]:
        """The rooms with a health target that a response forwarded for
        ``room`` counts for: its own (signal "room") and every "app" one."""
        if room.target is not None and room.target.signal == "room":
            return (room, *self.health.app_rooms)
        return self.health.app_rooms

    @staticmethod
    def _with_headers(send: Send, extra: Headers) -> Send:
        if not extra:
            return send

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        return send_with_headers
