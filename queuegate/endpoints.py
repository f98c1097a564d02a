"""The gate's own endpoints, under ``endpoint`` (``/_queuegate``): a visitor's
place (``status/<room>``, JSON), pushed as it changes (``stream/<room>``,
Server-Sent Events; see ``queuegate.streams``, fed by ``queuegate.feeds``),
giving it up (``leave/<room>``, POST from the site itself), and a proof of
work paying for a place (``join/<room>``, POST; see ``queuegate.challenges``).
Only ``join`` ever joins the line.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from .feeds import Feeds
from .pages import Page, send_page
from .settings import Room
from .store import Outcome, StoreError
from .streams import HEADERS as STREAM_HEADERS
from .streams import serve
from .visitors import Visitor

if TYPE_CHECKING:
    from .gate import QueueGate

__all__ = ["MAX_STREAMS_PER_VISITOR", "Endpoints", "wants_json"]

# Open streams one visitor may hold per process (a page holds one; a few
# tabs more): each makes status calls, so a client cannot multiply them.
MAX_STREAMS_PER_VISITOR = 4


# The methods each endpoint answers.
READ = frozenset({"GET", "HEAD"})
POSTED = frozenset({"POST"})


def wants_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"accept":
            return b"application/json" in value and b"text/html" not in value
    return False


def _same_origin(scope: Scope) -> bool:
    """Whether a browser says this request comes from the site itself (for
    the leave endpoint: SameSite=Lax still sends the cookie from a sibling
    subdomain). Sec-Fetch-Site decides when present; else Origin must name
    the request's own host; a client that sends neither is not a browser
    acting for a third-party page."""
    origin = host = None
    for name, value in scope["headers"]:
        if name == b"sec-fetch-site":
            return value in (b"same-origin", b"none")
        if name == b"origin":
            origin = value
        elif name == b"host":
            host = value
    if origin is None:
        return True
    return host is not None and origin.partition(b"://")[2] == host


# Routes up to this long have their match cached (a room's name is at most 100).
CACHED_ROUTE_LENGTH = 200

# A solved challenge is a few hundred bytes; nothing larger is read.
MAX_JOIN_BODY = 4096


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The request's body, or None past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _altcha_field(body: bytes) -> str:
    """The ``altcha`` value of a JSON object or a form; "" if none."""
    text = body.decode("utf-8", "replace").strip()
    value: object = None
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return ""
        value = parsed.get("altcha") if isinstance(parsed, dict) else None
    else:
        value = next(iter(parse_qs(text).get("altcha", [])), None)
    return value if isinstance(value, str) else ""


class Endpoints:
    def __init__(self, gate: QueueGate) -> None:
        self.gate = gate
        endpoint = gate.settings.endpoint
        self._pattern = re.compile(
            re.escape(endpoint) + r"/(status|leave|stream|join)/([A-Za-z0-9_-]{1,100})"
        )
        # What else begins with an action and a slash is the gate's too,
        # answered "no such room" (a trailing slash, a name no room can
        # have, more after it): given to the app, it was a join where a room
        # covers it. The action alone (`/api/status` under endpoint="/api")
        # stays the app's.
        self._claimed = re.compile(re.escape(endpoint) + r"/(status|leave|stream|join)/.*", re.DOTALL)
        self._prefix = endpoint + "/"
        # A page polls the same route every few seconds (bounded: the room
        # part of a route is the client's to choose).
        self._cached_match = lru_cache(maxsize=1024)(self._match)
        self.feeds = Feeds(gate.store.invalidations, gate.store.places)
        self._streams: dict[tuple[str, str], int] = {}  # (room, visitor) -> open streams here

    def match(self, route: str) -> tuple[str, str] | None:
        """(action, room name) for a route path under the endpoint, if any;
        the name is "" for a route under an action's path (``status/``...)
        that is not an endpoint's one form (answered 404)."""
        if not route.startswith(self._prefix):
            return None
        if len(route) <= CACHED_ROUTE_LENGTH:
            return self._cached_match(route)
        return self._match(route)

    def _match(self, route: str) -> tuple[str, str] | None:
        found = self._pattern.fullmatch(route)
        if found is not None:
            return found[1], found[2]
        claimed = self._claimed.fullmatch(route)
        return None if claimed is None else (claimed[1], "")

    async def serve(self, action: str, name: str, scope: Scope, receive: Receive, send: Send) -> None:
        room = self.gate.rooms.room(name) if name else None
        posted = action in ("leave", "join")
        as_json = action != "leave" or wants_json(scope)
        if room is None:
            language = self.gate.answers.language(None, scope)
            await send_page(
                self.gate.pages.message("not_found", name, status=404, as_json=as_json, language=language),
                send,
            )
            return
        if scope["method"].upper() not in (POSTED if posted else READ):
            page = self.gate.pages.state(name, "method_not_allowed", 405)
            await send_page(page, send, [(b"allow", b"POST" if posted else b"GET, HEAD")])
            return
        if posted and not _same_origin(scope):
            await send_page(self.gate.answers.message("cross_site", room, scope, 403, as_json), send)
            return
        if action == "join":
            await self._join(room, scope, receive, send)
            return
        who = await self.gate.visitors.read(room, scope)
        if who.refused:
            page, headers = self.gate.answers.refused(room, scope, as_json)
            await send_page(page, send, headers)
        elif action == "leave":
            await self._leave(room, who.visitor, scope, as_json, send)
        elif who.visitor is None:
            await send_page(self.gate.pages.state(name, "none"), send)
        elif action == "stream" and scope["method"].upper() == "HEAD":
            # A stream's headers, and no stream: a HEAD never ends
            # otherwise (its body is dropped, and a stream has no end).
            await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
            await send({"type": "http.response.body", "body": b""})
        elif action == "stream":
            await self._stream(room, who, scope, receive, send)
        else:
            outcome = await self._place(room, who)
            # Renewed as a gated page's answer would be: the place and when
            # liveness was last recorded (a poll from a view of the line
            # reads them), a slid admission's end.
            cookie = (
                [] if outcome is None else self.gate.decisions.cookie(scope, room, who, who.visitor, outcome)
            )
            if outcome is None and self.gate.decisions.admitted_in_outage(room, who):
                # Redis away: what the gate does with the visitor's requests
                # (it lets them through: said 'unavailable' before).
                left = max(0, (who.until_ms - self.gate.store.redis_now_ms()) // 1000)
                page = self.gate.pages.state(name, "active", expires_in_seconds=left)
            else:
                page = self._status_page(room, outcome, scope)
            await send_page(page, send, cookie)

    async def _place(self, room: Room, who: Visitor) -> Outcome | None:
        """A visitor's place, never joining the line; None if Redis did not answer."""
        assert who.visitor is not None
        try:
            return await self.gate.store.enter(
                room,
                who.visitor,
                join=False,
                user_hash=who.user_hash,
                user_ttl=self.gate.settings.cookie_max_age,
                place=who.place,
                seen_ms=who.seen_ms,
            )
        except StoreError as exc:
            self.gate.decisions.store_failed(room, exc)
            return None

    def _status_page(self, room: Room, outcome: Outcome | None, scope: Scope) -> Page:
        if outcome is None:
            return self.gate.answers.unavailable(room, scope, as_json=True)
        if outcome.state in ("waiting", "prequeue"):
            return self.gate.answers.line_page(room, outcome, True, scope, status=200)
        if outcome.state == "active":
            expires_in = max(0, (outcome.expires_ms - outcome.now_ms) // 1000)
            return self.gate.pages.state(room.name, "active", expires_in_seconds=expires_in)
        return self.gate.pages.state(room.name, outcome.state)

    async def _stream(self, room: Room, who: Visitor, scope: Scope, receive: Receive, send: Send) -> None:
        """The visitor's place, pushed as it changes (see queuegate.streams)."""

        async def read() -> Outcome | None:
            outcome = await self._place(room, who)
            if outcome is not None and outcome.state == "waiting":
                # What the cookie would say now (a stream cannot set it).
                who.place, who.seen_ms = outcome.place, outcome.seen_ms
            return outcome

        def render(outcome: Outcome | None) -> str:
            return self._status_page(room, outcome, scope).body.decode()

        key = (room.name, who.visitor or "")
        if self._streams.get(key, 0) >= MAX_STREAMS_PER_VISITOR:
            # The page falls back to polling.
            await send_page(self.gate.pages.state(room.name, "too_many_streams", 429), send)
            return
        self._streams[key] = self._streams.get(key, 0) + 1
        try:
            await serve(self.feeds, room, read, render, receive, send)
        finally:
            left = self._streams[key] - 1
            if left:
                self._streams[key] = left
            else:
                del self._streams[key]

    async def _join(self, room: Room, scope: Scope, receive: Receive, send: Send) -> None:
        """A solved challenge (``{"altcha": "<payload>"}`` as JSON, or an
        ``altcha`` form field) pays for a place; the answer is the visitor's
        place in JSON, with its cookie, or a new challenge if the proof was
        not good (malformed, for another room, expired, spent or too easy)."""
        body = await _read_body(receive, MAX_JOIN_BODY)
        if body is None:
            await send_page(self.gate.pages.state(room.name, "too_large", 413), send)
            return
        proof = self.gate.challenges.check(room.name, _altcha_field(body))
        page, headers = await self.gate.decisions.decide(room, scope, proof=proof, as_json=True)
        if page is None:  # in: the page the visitor asked for will open
            page = self.gate.pages.state(room.name, "active")
        await send_page(page, send, headers)

    async def _leave(self, room: Room, visitor: str | None, scope: Scope, as_json: bool, send: Send) -> None:
        if visitor is not None:
            try:
                await self.gate.store.leave(room, visitor)
            except StoreError:
                failed = True  # answered below: no await inside a handler (tests/test_compiled.py)
            else:
                failed = False
            if failed:
                await send_page(self.gate.answers.unavailable(room, scope, as_json), send)
                return
        page = self.gate.answers.message("left", room, scope, 200, as_json)
        await send_page(page, send, [self.gate.visitors.clear_cookie(scope, room)])
