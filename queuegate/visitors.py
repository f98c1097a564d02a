"""Who is asking: the room's signed cookie, and the signed-in user, if any.

A missing, tampered, expired or foreign cookie means a new visitor; a token
bound to a user is refused when presented by anyone else. When a request
carries the room's cookie more than once, the last one counts, as in
Starlette's and Django's cookie parsers (they keep the last of a name).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache

from starlette.requests import Request
from starlette.types import Scope

from .settings import Room
from .tokens import Tokens

__all__ = ["Identify", "Visitor", "Visitors"]

Identify = Callable[[Request], Awaitable[str | None] | str | None]


@dataclass(slots=True)
class Visitor:
    visitor: str | None  # from a valid token, else None (a newcomer)
    user_hash: str | None  # the signed-in user, keyed-hashed
    refused: bool = False  # the token belongs to another user
    unbound: bool = False  # an anonymous token, now presented by a signed-in user


@lru_cache(maxsize=10_000)
def _cookie_pattern(name: str) -> re.Pattern[bytes]:
    # Pairs are split on ';' only, as the frameworks' parsers do; spaces
    # around names and values are ignored.
    return re.compile(rb"(?:^|;)\s*" + re.escape(name.encode()) + rb"\s*=\s*([^;\s]*)")


def cookie(scope: Scope, name: str) -> str | None:
    """The last value of cookie ``name`` in the request's Cookie header(s)."""
    pattern = _cookie_pattern(name)
    value = None
    for header, raw in scope["headers"]:
        if header == b"cookie":
            for found in pattern.finditer(raw):
                value = found[1]
    return None if value is None else value.decode("latin-1")


class Visitors:
    """Reads and writes the rooms' cookies; knows who is signed in."""

    def __init__(self, tokens: Tokens, identify: Identify | None, max_age: int, secure: bool) -> None:
        self.tokens = tokens
        self.identify = identify
        flags = "; Secure" if secure else ""
        self._cookie_flags = f"; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax{flags}"
        self._cookie_clear = f"=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax{flags}"

    def set_cookie(self, room: Room, visitor: str, user_hash: str | None) -> tuple[bytes, bytes]:
        value = f"qg_{room.name}={self.tokens.issue(room.name, visitor, user_hash)}{self._cookie_flags}"
        return (b"set-cookie", value.encode())

    def clear_cookie(self, room: Room) -> tuple[bytes, bytes]:
        return (b"set-cookie", f"qg_{room.name}{self._cookie_clear}".encode())

    async def _user(self, scope: Scope) -> str | None:
        assert self.identify is not None
        user = self.identify(Request(scope))
        if inspect.isawaitable(user):
            user = await user
        return user or None

    async def read(self, room: Room, scope: Scope) -> Visitor:
        """The token's visitor and the signed-in user, if any. A token bound
        to a user is refused when presented by anyone else (another user, or
        nobody signed in)."""
        user = None if self.identify is None else await self._user(scope)
        user_hash = None if user is None else self.tokens.user_hash(user)
        token = cookie(scope, f"qg_{room.name}")
        found = None if token is None else self.tokens.read(room.name, token)
        if found is None:
            return Visitor(None, user_hash)
        visitor, bound = found
        if bound is not None and (user is None or not self.tokens.is_user(bound, user)):
            return Visitor(None, user_hash, refused=True)
        return Visitor(visitor, user_hash, unbound=bound is None and user_hash is not None)
