"""The gate: a pure ASGI middleware in front of the protected paths.

Per request (http or websocket): serve the gate's own endpoints, match a
form of the path to a room (see ``paths`` and ``rooms``), skip it if a
bypass rule says so, then ask for the decision (``queuegate.decisions``)
and forward the request (with the headers it asks for, measured for the
rooms with a health target) or send the gate's answer, or refuse the
handshake (a websocket). Everything that can be prepared is prepared in
``__init__``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Mapping, Sequence

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .answers import GATE_KEY, Answers
from .challenges import Challenges
from .clients import ClientAddresses
from .decisions import Admission, Decisions, admission
from .endpoints import Endpoints
from .health import HealthReports
from .options import Settings
from .pages import Headers, Page, Pages, send_page
from .paths import compile_patterns, forms, route_path
from .rooms import Rooms
from .served import passing, watch_served
from .settings import ConfigError, Room
from .startup import registered, warming
from .store import FAR_FROM, Client, Store, connect
from .tasks import stop
from .tokens import Tokens
from .unrouted import say_unrouted
from .visitors import Identify, Visitors

logger = logging.getLogger("queuegate")

__all__ = ["Admission", "Identify", "QueueGate", "admission"]

BYPASS_HEADER = b"x-queuegate-bypass"
POLICY_VIOLATION = 1008  # websocket close code for a handshake refused before accept
# A target that is not a path (absolute form, a scheme before the path, no
# leading slash): some routers route the URL path they make of it (Quart
# dispatches "http://host/checkout" and "x:/checkout" to /checkout), others
# answer 404. No browser sends one to an origin server, so it is refused.
BAD_TARGET = Page(
    400,
    [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")],
    b"Bad Request: the request target must be a path starting with '/'.\n",
)
# Headers (a new cookie) route-bound gating asks the gate to add to the app's
# response, and an answer that replaces it (FastAPI's dependency raises).
HEADERS_KEY = "queuegate.headers"
ANSWER_KEY = "queuegate.answer"


def gate_of(scope: Scope) -> tuple[QueueGate, str]:
    """The gate in front of a request, and the root path it saw the request
    at (where its endpoints are); for route-bound gating."""
    found = scope.get(GATE_KEY)
    if found is None:
        raise RuntimeError(
            "queuegate: this route is gated, but no QueueGate middleware is in front of the app: serve "
            "the gate, not the app (with gate = QueueGate(app, ...), run `uvicorn module:gate`), or add "
            "it with app.add_middleware(QueueGate, rooms=[...], ...)"
        )
    return found  # type: ignore[no-any-return]


async def _deny_websocket(scope: Scope, receive: Receive, send: Send, page: Page, status: int = 403) -> None:
    """Refuse a websocket handshake: with the gate's answer as an HTTP
    response where the server supports it, else a close before accept
    (which servers turn into a 403)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [*page.headers, (b"content-length", str(len(page.body)).encode())]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": page.body})
    else:
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})


class QueueGate:
    """A virtual waiting room in front of the paths of ``rooms``.

    ``redis`` is a URL (``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://``, ``redis+sentinel://``) or a ``redis.asyncio.Redis``
    (or ``RedisCluster``) client. ``identify(request)`` may return the id of
    a signed-in user (or ``None``), so that a user holds one place per room
    across devices. The other options are those of
    ``queuegate.Settings``; each one left as ``None`` is read
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
        try:
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
        except ConfigError as exc:
            # Starlette makes an add_middleware gate at the first event the
            # app is sent: under uvicorn's default --lifespan auto, an error
            # there is taken for "lifespan unsupported", and then shows only
            # in each request's 500. Said here as what it is.
            logger.error(
                "queuegate: the gate did not start, a setting is wrong: %s (if the server keeps "
                "running, as uvicorn's default --lifespan auto lets it with a gate added by "
                "add_middleware, every request answers 500 until it is fixed: run uvicorn with "
                "--lifespan on to stop it instead)",
                exc,
            )
            raise
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
            self.client_address.scheme,
        )
        self.pages = Pages(settings.waiting_status, waiting_template)
        self._bypass_paths = compile_patterns(settings.bypass_paths)
        self._bypass_secret = None if settings.bypass_secret is None else settings.bypass_secret.encode()
        self._bypass_networks = [ipaddress.ip_network(n, strict=False) for n in settings.bypass_networks]
        self._no_bypass = not (self._bypass_paths or self._bypass_secret or self._bypass_networks)
        self._endpoints = settings.endpoint + "/"
        self._at_root = (self, "")  # scope[GATE_KEY] of a request at the root path
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
        self.decisions = Decisions(self)
        self.endpoints = Endpoints(self)
        self.health = HealthReports(self.store, settings.rooms)
        # Measure around the whole app: for "app" signals, and for rooms with
        # a target that a dependency or decorator may gate further in.
        self._measure_all = any(room.target is not None for room in settings.rooms)
        # The look for a loss of Redis's data not started yet (queuegate.dataloss).
        self._unwatched = True
        self._registering: asyncio.Task[None] | None = None  # the same, at the first request
        self._served = watch_served(self, app)  # the app served without the gate, said at its start

    # -- routing -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            if self._unwatched:  # a server that ran no lifespan (Django's handler, daphne)
                self._unwatched = False
                self.store.data_watch.start()
                # Its rooms made known, those with somebody waiting ticked, beside this request.
                self._registering = asyncio.get_running_loop().create_task(registered(self.store, self.rooms))
            path = scope["path"]
            if path[:1] != "/" and not (path == "*" and scope.get("method") == "OPTIONS"):
                await self._refuse_target(scope, receive, send)
                return
            root = scope.get("root_path", "")
            scope[GATE_KEY] = (self, root) if root else self._at_root
            if kind == "http":
                route = route_path(path, root) if root else path
                if route.startswith(self._endpoints):
                    found = self.endpoints.match(route)
                    if found is not None:
                        await self.endpoints.serve(*found, scope, receive, send)
                        return
            # A websocket handshake is a GET.
            room = self.rooms.match(path, scope.get("method", "GET"), root)
            if room is not None and (self._no_bypass or not self.bypassed(scope)):
                if kind == "http":
                    # Most requests to a gated page come from admitted
                    # visitors: decided here, without a decision's coroutines.
                    copied = self.decisions.copied_admission(room, scope)
                    if copied is not None:
                        scope["queuegate"] = copied
                        await self._forward(room, scope, receive, send, self.app)
                        return
                await self.gate_request(room, scope, receive, send, self.app, copy_checked=kind == "http")
                return
            if self.route_bound and kind == "http":
                send = self._route_send(scope, send)
            if kind == "http" and self._measure_all:
                await self.health.forward(self.health.app_rooms, self.app, scope, receive, send)
                return
        elif kind == "lifespan":
            say_unrouted(self.app, self.settings.rooms)  # the app's routes are all there by now
            receive = warming(self.store, self.rooms, receive, self._started)
            send = self._closing_send(send)
            with passing(self._served):
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse_target(scope: Scope, receive: Receive, send: Send) -> None:
        """A 400 for a target that is not a path; ``OPTIONS *`` (the asterisk
        form, which names the server, not a resource) is matched as "/*"
        like any path and goes on to the app unless a room covers "/*"."""
        if scope["type"] == "websocket":
            await _deny_websocket(scope, receive, send, BAD_TARGET, 400)
        else:
            await send_page(BAD_TARGET, send)

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
        """At the lifespan's shutdown, the gate's connections closed if it
        made them; else (a client given) its look for a loss of data and
        its rooms' registration stop, and the client is left to its owner."""

        async def closing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                if self._owns_client:
                    await self.aclose()
                else:
                    if self._registering is not None:
                        await stop([self._registering])
                    await self.store.data_watch.aclose()
            await send(message)

        return closing_send

    def _started(self) -> None:
        """The lifespan's startup registered the rooms: the first request need not."""
        self._unwatched = False

    async def aclose(self) -> None:
        """Close the gate's connections (its lifespan does, when it owns them)."""
        if self._registering is not None:
            await stop([self._registering])
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

    async def gate_request(
        self,
        room: Room,
        scope: Scope,
        receive: Receive,
        send: Send,
        app: ASGIApp,
        *,
        copy_checked: bool = False,
    ) -> None:
        """Forward the request to ``app`` or answer it, as the decision says
        (``copy_checked``: the process's copy of admissions was asked already)."""
        if scope["type"] == "websocket":
            # Only an admitted visitor connects; a handshake takes no place.
            # An open socket is not closed when the session ends later.
            page, _ = await self.decisions.decide(room, scope, join=False)
            if page is None:
                await app(scope, receive, send)
            else:
                await _deny_websocket(scope, receive, send, page)
            return
        decide = self.decisions.ask if copy_checked else self.decisions.decide
        page, headers = await decide(room, scope)
        if page is None:
            await self._forward(room, scope, receive, self._with_headers(send, headers), app)
        else:
            await send_page(page, send, headers)

    def _forward(
        self, room: Room, scope: Scope, receive: Receive, send: Send, app: ASGIApp
    ) -> Awaitable[None]:
        """``app`` answering a request let through for ``room`` (measured for
        the rooms with a health target it counts for)."""
        if self.route_bound:  # another room may be on the route too
            send = self._route_send(scope, send)
        if self._measure_all:
            measured = self._measured_for(room)
            if measured:
                return self.health.forward(measured, app, scope, receive, send)
        return app(scope, receive, send)

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
