"""Who is asking: the room's signed cookie, and the signed-in user, if any.

A missing, tampered, expired or foreign cookie means a new visitor; a token
bound to a user is refused when presented by anyone else. When a request
carries the room's cookie more than once, the last one counts, as in
Starlette's and Django's cookie parsers (they keep the last of a name).

With ``bind_cookie``, a token is bound to a coarse fingerprint of the client
that got it (its network, /24 or /48, and/or a hash of its User-Agent): the
same cookie from another client counts as no cookie, so a shared admission
admits one client. A token issued before binding was turned on stays valid.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from starlette.requests import Request
from starlette.types import Scope

from .settings import Room
from .tokens import Token, Tokens

__all__ = ["Identify", "Visitor", "Visitors"]

logger = logging.getLogger("queuegate")

MAX_USER_AGENT = 512  # bytes of a User-Agent that count for the binding
# Cookie headers remembered with the valid token they carry (Visitors.token):
# parsing the header and looking its token up was a third of the gate's
# work for an admitted visitor. Bounded against a client that sends a valid
# token in ever new headers: at most 10,000 headers of at most 2 KB (about
# 25 MB); longer headers are parsed each time.
KNOWN_HEADERS = 10_000
MAX_KNOWN_HEADER = 2048

SECURE_SCHEMES = frozenset({"https", "wss"})

Identify = Callable[[Request], Awaitable[str | None] | str | None]


@dataclass(slots=True)
class Visitor:
    visitor: str | None  # from a valid token, else None (a newcomer)
    user_hash: str | None  # the signed-in user, keyed-hashed
    refused: bool = False  # the token belongs to another user
    unbound: bool = False  # an anonymous token, now presented by a signed-in user
    until_ms: int = 0  # the admission's end the token carries (Redis time), 0 = none
    binding: str = ""  # this client's fingerprint, when cookies are bound
    place: int = 0  # the arrival number the token carries, 0 = none
    seen_ms: int = 0  # when the token says liveness was last recorded


def _values(raw: bytes, name: bytes) -> list[bytes]:
    """Every value of cookie ``name`` in one Cookie header, in order."""
    values = []
    if name in raw:
        for pair in raw.split(b";"):
            key, equals, rest = pair.partition(b"=")
            if equals and key.strip() == name:
                words = rest.split(None, 1)
                value = words[0] if words else b""
                # A value in double quotes (RFC 6265's cookie-value allows
                # them; some clients quote): the value within, as the
                # frameworks read it (it was no cookie: a newcomer each time).
                if len(value) >= 2 and value[:1] == b'"' and value[-1:] == b'"':
                    value = value[1:-1]
                values.append(value)
    return values


def _last_value(raw: bytes, name: bytes, value: bytes | None = None) -> bytes | None:
    """The last value of cookie ``name`` in one Cookie header, else ``value``."""
    values = _values(raw, name)
    return values[-1] if values else value


def cookie(scope: Scope, name: bytes) -> str | None:
    """The last value of cookie ``name`` in the request's Cookie header(s).

    Pairs are split on ';' and at their first '=', as the frameworks'
    parsers do; white space around names and values is ignored, a value
    ends at white space, and one in double quotes is the value within.
    (Split and partition: a regular expression over the header took three
    times as long, on every gated request.)"""
    value = None
    for header, raw in scope["headers"]:
        if header == b"cookie":
            value = _last_value(raw, name, value)
    return None if value is None else value.decode("latin-1")


def _server_scheme(scope: Scope) -> str:
    return str(scope.get("scheme") or ("ws" if scope["type"] == "websocket" else "http"))


class Visitors:
    """Reads and writes the rooms' cookies; knows who is signed in."""

    def __init__(
        self,
        tokens: Tokens,
        identify: Identify | None,
        max_age: int,
        secure: bool | None,
        bind: Sequence[str] = (),
        network: Callable[[Scope], str] | None = None,
        scheme: Callable[[Scope], str] | None = None,
    ) -> None:
        self.tokens = tokens
        self.identify = identify
        self._bind_agent = "user_agent" in bind
        self._network = network if "network" in bind else None
        self._plain = identify is None and not self._bind_agent and self._network is None
        self._fingerprint = lru_cache(maxsize=16_384)(tokens.fingerprint)
        # (a room's cookie name, a Cookie header) -> the valid token found
        # in it for that room, and when it was issued. Keys cannot change
        # under it: new keys make new Tokens and Visitors.
        self._known: dict[tuple[bytes, bytes], tuple[Token, float]] = {}
        self._max_age = tokens.max_age
        # secure=None: Secure when the client came over https (see secure()).
        self._secure = secure
        self._scheme = scheme or _server_scheme
        self._warned = False
        # Both cases prebuilt, indexed by Secure or not.
        flags = f"; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax"
        self._cookie_flags = (flags.encode(), (flags + "; Secure").encode())
        clear = "=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
        self._cookie_clear = (clear.encode(), (clear + "; Secure").encode())

    def secure(self, scope: Scope) -> bool:
        """Whether this request's cookies are ``Secure``: as ``cookie_secure``
        says, else when the client used https (or wss). A browser keeps a
        ``Secure`` cookie from an https page only, and no client sends one
        over plain http: there, every request would be a newcomer."""
        if self._secure is not None:
            return self._secure
        if self._scheme(scope) in SECURE_SCHEMES:
            return True
        if not self._warned:
            self._warned = True
            logger.warning(
                "queuegate: a gated page is served over plain http, so the rooms' cookies are set "
                "without Secure (over https they have it). Behind a TLS proxy, let the server trust "
                "its X-Forwarded-Proto (or list it in trusted_proxies), or force Secure with "
                "cookie_secure=True (QUEUEGATE_COOKIE_SECURE=true)."
            )
        return False

    def set_cookie(
        self,
        scope: Scope,
        room: Room,
        visitor: str,
        user_hash: str | None,
        until_ms: int = 0,
        binding: str = "",
        place: int = 0,
        seen_ms: int = 0,
    ) -> tuple[bytes, bytes]:
        # The token as signed, in bytes: not decoded to be encoded again.
        token = self.tokens.signed(room.name, visitor, user_hash, until_ms, binding, place, seen_ms)
        return (b"set-cookie", room.cookie + b"=" + token + self._cookie_flags[self.secure(scope)])

    def _client(self, scope: Scope) -> bytes:
        """What a bound cookie is bound to: the client's network and/or agent."""
        agent = b""
        if self._bind_agent:
            for name, value in scope["headers"]:
                if name == b"user-agent":
                    agent = value[:MAX_USER_AGENT]
        network = b"" if self._network is None else self._network(scope).encode()
        return network + b"|" + agent

    def clear_cookie(self, scope: Scope, room: Room) -> tuple[bytes, bytes]:
        return (b"set-cookie", room.cookie + self._cookie_clear[self.secure(scope)])

    async def _user(self, scope: Scope) -> str | None:
        assert self.identify is not None
        user = self.identify(Request(scope))
        if inspect.isawaitable(user):
            user = await user
        return user or None

    def _same_client(self, binding: str, client: bytes | None) -> bool:
        # Under an older secret key (rotated since the token was issued).
        return client is not None and self.tokens.is_fingerprint(binding, client)

    def token(self, room: Room, scope: Scope) -> Token | None:
        """The valid token of the room's cookie in the request, if any.

        A visitor sends the same Cookie header request after request: the
        token found in it is remembered by the header (see
        ``KNOWN_HEADERS``) until its age runs out."""
        raw = None
        for header, value in scope["headers"]:
            if header == b"cookie":
                if raw is not None:  # several Cookie headers (HTTP/2 may split them)
                    joined = b";".join(v for h, v in scope["headers"] if h == b"cookie")
                    found = self._verified(room, joined)
                    return None if found is None else found[0]
                raw = value
        if raw is None:
            return None
        key = (room.cookie, raw)
        known = self._known.get(key)
        if known is not None:
            if time.time() - known[1] <= self._max_age:
                return known[0]
            del self._known[key]
            return None
        found = self._verified(room, raw)
        if found is None:
            return None
        if len(raw) <= MAX_KNOWN_HEADER:
            if len(self._known) >= KNOWN_HEADERS:
                self._known.clear()
            self._known[key] = found
        return found[0]

    def _verified(self, room: Room, raw: bytes) -> tuple[Token, float] | None:
        # The last value of the room's cookie that verifies. Of two valid
        # ones the last counts, as in Starlette and Django; one that does
        # not verify (a stray duplicate: a parent domain's cookie of the
        # same name, junk a sibling site set) costs its visitor nothing:
        # read last, it took an admitted buyer's admission and a waiting
        # visitor's place (an auditor's raw requests).
        for value in reversed(_values(raw, room.cookie)):
            found = self.tokens.verified(room.name, value.decode("latin-1"))
            if found is not None:
                return found
        return None

    def anonymous(self, room: Room, scope: Scope) -> Token | None:
        """The token of a request that :meth:`read` would take as nobody's
        but its bearer's (no user signed in, no binding to check), without
        asking who is signed in; ``None`` when there is no such token or
        the gate identifies users or binds cookies (then ask :meth:`read`)."""
        if self._plain:
            found = self.token(room, scope)
            if found is not None and found.user_hash is None and not found.binding:
                return found
        return None

    async def read(self, room: Room, scope: Scope) -> Visitor:
        """The token's visitor and the signed-in user, if any. A token bound
        to a user is refused when presented by anyone else (another user, or
        nobody signed in)."""
        user = None if self.identify is None else await self._user(scope)
        user_hash = None if user is None else self.tokens.user_hash(user)
        client = None
        binding = ""
        if self._bind_agent or self._network is not None:
            client = self._client(scope)
            binding = self._fingerprint(client)
        found = self.token(room, scope)
        # A newcomer's and a token's Visitor are made with their fields by
        # position: a dataclass called with keywords makes a dict of them
        # (the last one's 5,200 instructions, 2,600 by position), on every
        # join and poll.
        if found is None:
            return Visitor(None, user_hash, False, False, 0, binding)
        if found.binding and found.binding != binding and not self._same_client(found.binding, client):
            return Visitor(None, user_hash, binding=binding)  # another client's cookie
        bound = found.user_hash
        if bound is not None and (user is None or not self.tokens.is_user(bound, user)):
            return Visitor(None, user_hash, refused=True, binding=binding)
        return Visitor(
            found.visitor,
            user_hash,
            False,
            bound is None and user_hash is not None,  # unbound
            found.until_ms,
            binding,
            found.place,
            found.seen_ms,
        )
