"""The gate: a pure ASGI middleware in front of the protected paths.

Per gated request: match the path to a room, skip it if a bypass rule says
so, read the room's signed cookie, make one script call, then forward
(active) or answer with the waiting page or JSON. Everything that can be
prepared is prepared in ``__init__``.
"""

from __future__ import annotations

import hmac
import inspect
import ipaddress
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis.asyncio as aioredis
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .pages import Page, Pages
from .paths import compile_patterns, normalise
from .rooms import Rooms
from .settings import ConfigError, Room, Settings
from .store import Client, Outcome, Store, StoreError, connect
from .tokens import Tokens, new_visitor_id

__all__ = ["Admission", "Identify", "QueueGate", "admission"]

logger = logging.getLogger("queuegate")

FAILURE_LOG_INTERVAL = 10.0  # seconds; one log line per burst of Redis failures
UNAVAILABLE_RETRY = 5  # seconds a client should wait after a failed check
BYPASS_HEADER = b"x-queuegate-bypass"

Identify = Callable[[Request], Awaitable[str | None] | str | None]


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


@dataclass(slots=True)
class _Visitor:
    visitor: str | None  # from a valid token, else None (a newcomer)
    user_hash: str | None  # the signed-in user, keyed-hashed
    refused: bool = False  # the token belongs to another user
    unbound: bool = False  # an anonymous token, now presented by a signed-in user


def admission(request: Any) -> Admission | None:
    """The admission of a request (a Starlette ``Request`` or an ASGI scope),
    or ``None`` when the path is not gated or the store failed open."""
    scope = getattr(request, "scope", request)
    found = scope.get("queuegate") if isinstance(scope, Mapping) else None
    return found if isinstance(found, Admission) else None


def _wants_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"accept":
            return b"application/json" in value and b"text/html" not in value
    return False


@lru_cache(maxsize=10_000)
def _cookie_pattern(name: str) -> re.Pattern[bytes]:
    return re.compile(rb"(?:^|[;,]\s*)" + re.escape(name.encode()) + rb"=([^;,\s]*)")


def _cookie(scope: Scope, name: str) -> str | None:
    """One cookie's value from the request's Cookie header(s), or ``None``.
    (A regex over the raw header: the gate reads one cookie per request.)"""
    pattern = _cookie_pattern(name)
    for header, value in scope["headers"]:
        if header == b"cookie":
            found = pattern.search(value)
            if found:
                return found[1].decode("latin-1")
    return None


async def _send_page(page: Page, send: Send, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    headers = [*page.headers, *extra, (b"content-length", str(len(page.body)).encode())]
    await send({"type": "http.response.start", "status": page.status, "headers": headers})
    await send({"type": "http.response.body", "body": page.body})


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
        max_connections: int | None = None,
        waiting_status: int | None = None,
        endpoint: str | None = None,
        bypass_paths: Sequence[str] | None = None,
        bypass_secret: str | None = None,
        bypass_networks: Sequence[str] | None = None,
        trusted_proxies: Sequence[str] | None = None,
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
            max_connections=max_connections,
            waiting_status=waiting_status,
            endpoint=endpoint,
            bypass_paths=bypass_paths,
            bypass_secret=bypass_secret,
            bypass_networks=bypass_networks,
            trusted_proxies=trusted_proxies,
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
        self.identify = identify
        self.store = Store(client, settings.prefix, settings.timeout)
        self.rooms = Rooms(settings.rooms, self.store)
        self.tokens = Tokens(settings.secret_keys, settings.cookie_max_age)
        self.pages = Pages(settings.waiting_status, waiting_template)
        self._bypass_paths = compile_patterns(settings.bypass_paths)
        self._bypass_secret = None if settings.bypass_secret is None else settings.bypass_secret.encode()
        self._bypass_networks = [ipaddress.ip_network(n, strict=False) for n in settings.bypass_networks]
        self._no_bypass = not (self._bypass_paths or self._bypass_secret or self._bypass_networks)
        self._trusted = [ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies]
        self._client_of = lru_cache(maxsize=65_536)(self._resolve_client)
        self._hop = lru_cache(maxsize=4096)(self._parse_hop)
        secure = "; Secure" if settings.cookie_secure else ""
        self._cookie_flags = f"; Path=/; Max-Age={settings.cookie_max_age}; HttpOnly; SameSite=Lax{secure}"
        self._cookie_clear = f"=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax{secure}"
        self._endpoint = re.compile(re.escape(settings.endpoint) + r"/(status|leave)/([A-Za-z0-9_-]{1,100})")
        self._endpoint_prefix = settings.endpoint + "/"
        self.counters = {"failed_open": 0, "failed_closed": 0, "refused": 0, "bypassed": 0}
        self._last_failure_log = 0.0

    # -- routing -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path.startswith(self._endpoint_prefix):
                found = self._endpoint.fullmatch(path)
                if found:
                    await self._serve_endpoint(found[1], found[2], scope, send)
                    return
            canonical = normalise(path)
            room = self.rooms.match(canonical, scope["method"])
            if room is not None and not self._bypassed(canonical, scope):
                await self._gate(room, scope, receive, send)
                return
        elif scope["type"] == "lifespan" and self._owns_client:
            await self.app(scope, receive, self._closing_send(send))
            return
        await self.app(scope, receive, send)

    def match(self, path: str, method: str = "GET") -> Room | None:
        """The room that gates ``path`` (after normalisation), if any."""
        return self.rooms.match(normalise(path), method)

    def _bypassed(self, canonical: str, scope: Scope) -> bool:
        if self._no_bypass:
            return False
        if self._bypass_rule(canonical, scope):
            self.counters["bypassed"] += 1
            return True
        return False

    def _bypass_rule(self, canonical: str, scope: Scope) -> bool:
        """Bypass rules, checked before any Redis call: paths, the secret
        header, client networks (the client address as the server reports it;
        behind a proxy, let the server trust its forwarded-for header)."""
        if any(p.fullmatch(canonical) for p in self._bypass_paths):
            return True
        if self._bypass_secret is not None:
            for name, value in scope["headers"]:
                if name == BYPASS_HEADER and hmac.compare_digest(value, self._bypass_secret):
                    return True
        if self._bypass_networks and scope.get("client"):
            try:
                address = ipaddress.ip_address(scope["client"][0])
            except ValueError:
                return False
            return any(address in network for network in self._bypass_networks)
        return False

    def _closing_send(self, send: Send) -> Send:
        async def closing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.store.aclose()
            await send(message)

        return closing_send

    # -- visitors ------------------------------------------------------------

    def _set_cookie(self, room: Room, visitor: str, user_hash: str | None) -> tuple[bytes, bytes]:
        value = f"qg_{room.name}={self.tokens.issue(room.name, visitor, user_hash)}{self._cookie_flags}"
        return (b"set-cookie", value.encode())

    def _clear_cookie(self, room: Room) -> tuple[bytes, bytes]:
        return (b"set-cookie", f"qg_{room.name}{self._cookie_clear}".encode())

    async def _user(self, scope: Scope) -> str | None:
        if self.identify is None:
            return None
        user = self.identify(Request(scope))
        if inspect.isawaitable(user):
            user = await user
        return user or None

    async def _visitor(self, room: Room, scope: Scope) -> _Visitor:
        """Who is asking: the token's visitor and the signed-in user, if any.

        A token bound to a user is refused when presented by anyone else
        (another user, or nobody signed in)."""
        user = None if self.identify is None else await self._user(scope)
        user_hash = None if user is None else self.tokens.user_hash(user)
        token = _cookie(scope, f"qg_{room.name}")
        found = None if token is None else self.tokens.read(room.name, token)
        if found is None:
            return _Visitor(None, user_hash)
        visitor, bound = found
        if bound is not None and (user is None or not self.tokens.is_user(bound, user)):
            return _Visitor(None, user_hash, refused=True)
        return _Visitor(visitor, user_hash, unbound=bound is None and user_hash is not None)

    def client_address(self, scope: Scope) -> str:
        """Who is asking, for the per-client limit on new places: the peer's
        address, or, when the peer is a trusted proxy, the last address in
        X-Forwarded-For that is not one. An IPv6 client counts as its /64
        (one household's or phone's whole range)."""
        peer = (scope.get("client") or ("", 0))[0]
        forwarded = None
        if self._trusted:
            for name, value in scope["headers"]:
                if name == b"x-forwarded-for":
                    forwarded = value
        return self._client_of(peer, forwarded)

    def _resolve_client(self, peer: str, forwarded: bytes | None) -> str:
        # Parsing addresses costs more than the rest of an admitted request's
        # own work: the answers are cached (see __init__), and so is each hop
        # (behind a proxy, every new client comes through the same one).
        chain = [peer] if forwarded is None else [*forwarded.decode("latin-1").split(","), peer]
        address = None
        for hop in reversed(chain):
            parsed, trusted = self._hop(hop.strip())
            if parsed is None:
                break
            address = parsed
            if not trusted:
                break
        if address is None:
            return "unknown"
        if address.version == 6:
            return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address) + "/64"
        return str(address)

    def _parse_hop(self, text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address | None, bool]:
        """An address and whether it is a trusted proxy's; ``None`` if it is none."""
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return None, False
        return address, any(address in network for network in self._trusted)

    def _store_failed(self, room: Room, exc: StoreError) -> None:
        """Redis did not answer: count it, and log it once per burst."""
        self.counters["failed_open" if room.fail == "open" else "failed_closed"] += 1
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_INTERVAL:
            self._last_failure_log = now
            logger.warning(
                "queuegate: Redis did not answer for room %r (%s); failing %s", room.name, exc, room.fail
            )

    def _line_page(self, room: Room, outcome: Outcome, as_json: bool, status: int | None = None) -> Page:
        base = self.settings.endpoint
        return self.pages.waiting(
            room.title or room.name,
            room.name,
            outcome,
            status_url=f"{base}/status/{room.name}",
            leave_url=f"{base}/leave/{room.name}",
            as_json=as_json,
            status=status,
        )

    def _unavailable(self, room: Room, as_json: bool) -> Page:
        return self.pages.message(
            "unavailable", room.name, status=503, as_json=as_json, retry_after=UNAVAILABLE_RETRY
        )

    async def _refuse(self, room: Room, as_json: bool, send: Send) -> None:
        # The cookie is cleared: next time this browser is simply a newcomer.
        self.counters["refused"] += 1
        page = self.pages.message("refused", room.name, status=403, as_json=as_json)
        await _send_page(page, send, [self._clear_cookie(room)])

    # -- the gate ----------------------------------------------------------

    async def _gate(self, room: Room, scope: Scope, receive: Receive, send: Send) -> None:
        as_json = _wants_json(scope)
        who = await self._visitor(room, scope)
        if who.refused:
            await self._refuse(room, as_json, send)
            return
        asked = who.visitor or new_visitor_id()
        # The store is called here, not through a helper: the reply comes
        # back through every coroutine level between it and this request.
        outcome: Outcome | None
        try:
            outcome = await self.store.enter(
                room,
                asked,
                user_hash=who.user_hash,
                user_ttl=self.settings.cookie_max_age,
                client=self.client_address(scope) if room.client_limit else "",
            )
        except StoreError as exc:
            self._store_failed(room, exc)
            outcome = None
        if outcome is None:
            if room.fail == "open":
                await self.app(scope, receive, send)
            else:
                await _send_page(self._unavailable(room, as_json), send)
            return
        # A new place in line, a place taken over from another device, or a
        # newly signed-in user: a new cookie, whose age counts from now.
        renew = who.visitor is None or outcome.joined or outcome.visitor != asked or who.unbound
        cookie = [self._set_cookie(room, outcome.visitor, who.user_hash)] if renew else []
        if outcome.state in ("active", "pass"):
            scope["queuegate"] = Admission(room.name, outcome.visitor, outcome.expires_ms, self)
            await self.app(scope, receive, self._with_headers(send, cookie))
        elif outcome.state in ("waiting", "prequeue"):
            await _send_page(self._line_page(room, outcome, as_json), send, cookie)
        elif outcome.state == "limited":
            retry = max(1, math.ceil(outcome.eta_ms / 1000))
            page = self.pages.message("limited", room.name, status=429, as_json=as_json, retry_after=retry)
            await _send_page(page, send)
        else:
            page = self.pages.message(
                "closed", room.name, status=self.settings.waiting_status, as_json=as_json, retry_after=60
            )
            await _send_page(page, send)

    @staticmethod
    def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
        if not extra:
            return send

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        return send_with_headers

    # -- the gate's own endpoints -----------------------------------------

    async def _serve_endpoint(self, action: str, name: str, scope: Scope, send: Send) -> None:
        room = self.rooms.room(name)
        as_json = action == "status" or _wants_json(scope)
        if room is None:
            await _send_page(self.pages.message("not_found", name, status=404, as_json=as_json), send)
            return
        method = scope["method"]
        if (action == "status" and method not in ("GET", "HEAD")) or (action == "leave" and method != "POST"):
            allowed = b"GET, HEAD" if action == "status" else b"POST"
            page = self.pages.state(name, "method_not_allowed", 405)
            await _send_page(page, send, [(b"allow", allowed)])
            return
        who = await self._visitor(room, scope)
        if who.refused:
            await self._refuse(room, as_json, send)
        elif action == "leave":
            await self._leave(room, who.visitor, as_json, send)
        elif who.visitor is None:
            await _send_page(self.pages.state(name, "none"), send)
        else:
            await self._status(room, who.visitor, who.user_hash, send)

    async def _status(self, room: Room, visitor: str, user_hash: str | None, send: Send) -> None:
        outcome: Outcome | None
        try:
            outcome = await self.store.enter(
                room, visitor, join=False, user_hash=user_hash, user_ttl=self.settings.cookie_max_age
            )
        except StoreError as exc:
            self._store_failed(room, exc)
            outcome = None
        if outcome is None:
            page = self._unavailable(room, as_json=True)
        elif outcome.state in ("waiting", "prequeue"):
            page = self._line_page(room, outcome, as_json=True, status=200)
        elif outcome.state == "active":
            expires_in = max(0, (outcome.expires_ms - outcome.now_ms) // 1000)
            page = self.pages.state(room.name, "active", expires_in_seconds=expires_in)
        else:
            page = self.pages.state(room.name, outcome.state)
        await _send_page(page, send)

    async def _leave(self, room: Room, visitor: str | None, as_json: bool, send: Send) -> None:
        if visitor is not None:
            try:
                await self.store.leave(room, visitor)
            except StoreError:
                await _send_page(self._unavailable(room, as_json), send)
                return
        page = self.pages.message("left", room.name, status=200, as_json=as_json)
        await _send_page(page, send, [self._clear_cookie(room)])
