"""The gate: a pure ASGI middleware in front of the protected paths.

Per gated request: match the path to a room, read the room's signed cookie,
make one script call, then forward (active), or answer with the waiting page
or JSON. Everything that can be prepared is prepared in ``__init__``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .pages import Page, Pages
from .paths import compile_patterns, normalise
from .settings import ConfigError, Room, Settings
from .store import Outcome, Store, StoreError, connect
from .tokens import Tokens, new_visitor_id

__all__ = ["Admission", "QueueGate", "admission"]

logger = logging.getLogger("queuegate")

FAILURE_LOG_INTERVAL = 10.0  # seconds; one log line per burst of Redis failures
UNAVAILABLE_RETRY = 5  # seconds a client should wait after a failed check


@dataclass(slots=True)
class Admission:
    """Put in ``scope["queuegate"]`` for a request the gate let through."""

    room: str
    visitor: str
    expires_ms: int
    gate: QueueGate = field(repr=False)

    async def release(self) -> bool:
        """The protected action is done: free this visitor's slot at once."""
        return await self.gate.store.release(self.gate.rooms[self.room], self.visitor)


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


def _cookies(scope: Scope) -> dict[str, str]:
    parts = [value.decode("latin-1") for name, value in scope["headers"] if name == b"cookie"]
    return cookie_parser("; ".join(parts)) if parts else {}


async def _send_page(page: Page, send: Send, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    headers = [*page.headers, *extra, (b"content-length", str(len(page.body)).encode())]
    await send({"type": "http.response.start", "status": page.status, "headers": headers})
    await send({"type": "http.response.body", "body": page.body})


class QueueGate:
    """A virtual waiting room in front of the paths of ``rooms``.

    ``redis`` is a URL (``redis://``, ``rediss://``, ``unix://``) or a
    ``redis.asyncio.Redis`` client. The other options are those of
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
        redis: str | aioredis.Redis | None = None,
        waiting_template: str | None = None,
        prefix: str | None = None,
        cookie_secure: bool | None = None,
        cookie_max_age: int | None = None,
        timeout: float | None = None,
        max_connections: int | None = None,
        waiting_status: int | None = None,
        endpoint: str | None = None,
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
        )
        if not settings.rooms:
            raise ConfigError("rooms: no room configured; pass rooms=[Room(...)] or set QUEUEGATE_ROOMS")
        self._owns_client = not isinstance(redis, aioredis.Redis)
        if isinstance(redis, aioredis.Redis):
            client = redis
        elif settings.redis_url is not None:
            client = connect(settings.redis_url, settings.timeout, settings.max_connections)
        else:
            raise ConfigError(
                "redis is not set: pass redis='redis://host:6379/0' (or a redis.asyncio "
                "client) or set QUEUEGATE_REDIS_URL"
            )
        self.settings = settings
        self.store = Store(client, settings.prefix)
        self.rooms: dict[str, Room] = {room.name: room for room in settings.rooms}
        self._matchers = [
            (
                compile_patterns(room.paths),
                None if room.methods is None else frozenset(m.upper() for m in room.methods),
                room,
            )
            for room in settings.rooms
        ]
        self.tokens = Tokens(settings.secret_keys, settings.cookie_max_age)
        self.pages = Pages(settings.waiting_status, waiting_template)
        self.timeout = settings.timeout
        flags = f"; Path=/; Max-Age={settings.cookie_max_age}; HttpOnly; SameSite=Lax"
        self._cookie_flags = flags + ("; Secure" if settings.cookie_secure else "")
        self._cookie_clear = "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax" + (
            "; Secure" if settings.cookie_secure else ""
        )
        self._endpoint = re.compile(re.escape(settings.endpoint) + r"/(status|leave)/([A-Za-z0-9_-]{1,64})")
        self._endpoint_prefix = settings.endpoint + "/"
        self.counters = {"failed_open": 0, "failed_closed": 0}
        self._last_failure_log = 0.0

    # -- routing -----------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"].startswith(self._endpoint_prefix):
                found = self._endpoint.fullmatch(scope["path"])
                if found:
                    await self._serve_endpoint(found[1], found[2], scope, send)
                    return
            room = self.match(scope["path"], scope["method"])
            if room is not None:
                await self._gate(room, scope, receive, send)
                return
        elif scope["type"] == "lifespan" and self._owns_client:
            await self.app(scope, receive, self._closing_send(send))
            return
        await self.app(scope, receive, send)

    def match(self, path: str, method: str = "GET") -> Room | None:
        """The first room whose patterns cover ``path`` (after normalisation)."""
        canonical = normalise(path)
        for pattern, methods, room in self._matchers:
            if (methods is None or method in methods) and pattern.fullmatch(canonical):
                return room
        return None

    def _closing_send(self, send: Send) -> Send:
        async def closing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.store.aclose()
            await send(message)

        return closing_send

    # -- the gate ----------------------------------------------------------

    def _set_cookie(self, room: Room, visitor: str) -> tuple[bytes, bytes]:
        value = f"qg_{room.name}={self.tokens.issue(room.name, visitor)}{self._cookie_flags}"
        return (b"set-cookie", value.encode())

    def _visitor(self, room: Room, scope: Scope) -> str | None:
        token = _cookies(scope).get(f"qg_{room.name}")
        return None if token is None else self.tokens.read(room.name, token)

    async def _enter(self, room: Room, visitor: str, join: bool) -> Outcome | None:
        """One script call within the timeout; ``None`` when the store failed."""
        try:
            async with asyncio.timeout(self.timeout):
                return await self.store.enter(room, visitor, join=join)
        except (StoreError, TimeoutError) as exc:
            self.counters["failed_open" if room.fail == "open" else "failed_closed"] += 1
            now = time.monotonic()
            if now - self._last_failure_log >= FAILURE_LOG_INTERVAL:
                self._last_failure_log = now
                logger.warning(
                    "queuegate: Redis did not answer for room %r (%s); failing %s",
                    room.name,
                    exc or "timeout",
                    room.fail,
                )
            return None

    def _waiting_page(self, room: Room, outcome: Outcome, as_json: bool, status: int | None = None) -> Page:
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

    async def _gate(self, room: Room, scope: Scope, receive: Receive, send: Send) -> None:
        visitor = self._visitor(room, scope)
        fresh = visitor is None
        if visitor is None:
            visitor = new_visitor_id()
        outcome = await self._enter(room, visitor, join=True)
        as_json = _wants_json(scope)
        if outcome is None:
            if room.fail == "open":
                await self.app(scope, receive, send)
                return
            page = self.pages.message(
                "unavailable", room.name, status=503, as_json=as_json, retry_after=UNAVAILABLE_RETRY
            )
            await _send_page(page, send)
            return
        # A new place in line gets a new cookie, so the token's age counts
        # from the time the visitor joined.
        cookie = [self._set_cookie(room, visitor)] if fresh or outcome.joined else []
        if outcome.state in ("active", "pass"):
            scope["queuegate"] = Admission(room.name, visitor, outcome.expires_ms, self)
            await self.app(scope, receive, self._with_headers(send, cookie))
        elif outcome.state == "waiting":
            page = self._waiting_page(room, outcome, as_json)
            await _send_page(page, send, cookie)
        else:
            page = self.pages.message(
                "closed",
                room.name,
                status=self.settings.waiting_status,
                as_json=as_json,
                retry_after=60,
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
        room = self.rooms.get(name)
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
        visitor = self._visitor(room, scope)
        if action == "leave":
            await self._leave(room, visitor, as_json, send)
        elif visitor is None:
            await _send_page(self.pages.state(name, "none"), send)
        else:
            await self._status(room, visitor, send)

    async def _status(self, room: Room, visitor: str, send: Send) -> None:
        outcome = await self._enter(room, visitor, join=False)
        if outcome is None:
            page = self.pages.message(
                "unavailable", room.name, status=503, as_json=True, retry_after=UNAVAILABLE_RETRY
            )
        elif outcome.state == "waiting":
            page = self._waiting_page(room, outcome, as_json=True, status=200)
        elif outcome.state == "active":
            expires_in = max(0, (outcome.expires_ms - outcome.now_ms) // 1000)
            page = self.pages.state(room.name, "active", expires_in_seconds=expires_in)
        else:
            page = self.pages.state(room.name, outcome.state)
        await _send_page(page, send)

    async def _leave(self, room: Room, visitor: str | None, as_json: bool, send: Send) -> None:
        if visitor is not None:
            try:
                async with asyncio.timeout(self.timeout):
                    await self.store.leave(room, visitor)
            except (StoreError, TimeoutError):
                page = self.pages.message(
                    "unavailable", room.name, status=503, as_json=as_json, retry_after=UNAVAILABLE_RETRY
                )
                await _send_page(page, send)
                return
        page = self.pages.message("left", room.name, status=200, as_json=as_json)
        await _send_page(page, send, [(b"set-cookie", f"qg_{room.name}{self._cookie_clear}".encode())])
