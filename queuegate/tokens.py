"""Queue tokens: a random visitor id in a signed, timestamped cookie value.

The token holds nothing but the id and its issue time (no user ids). Each
room signs with its own salt, so a token from one room is worthless in
another. A token that fails in any way (tampered, truncated, too old, foreign
room, retired key) reads as ``None``: the visitor is simply new.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from functools import lru_cache

from itsdangerous import BadData, TimestampSigner

__all__ = ["Tokens", "new_visitor_id"]


def new_visitor_id() -> str:
    """96 random bits, URL-safe, 16 characters: short to keep Redis small."""
    return secrets.token_urlsafe(12)


class Tokens:
    def __init__(self, secret_keys: Sequence[str], max_age: int) -> None:
        # itsdangerous signs with the last key and verifies with all of them;
        # our settings list the newest first.
        self._keys = [key.encode() for key in reversed(secret_keys)]
        self.max_age = max_age
        self._signer = lru_cache(maxsize=4096)(self._make_signer)

    def _make_signer(self, room: str) -> TimestampSigner:
        return TimestampSigner(self._keys, salt=f"queuegate.room.{room}", digest_method=hashlib.sha256)

    def issue(self, room: str, visitor_id: str) -> str:
        return self._signer(room).sign(visitor_id).decode()

    def read(self, room: str, token: str) -> str | None:
        """The visitor id in a valid token for this room, else ``None``."""
        try:
            value = self._signer(room).unsign(token, max_age=self.max_age)
        except (BadData, UnicodeError, ValueError):
            return None
        return value.decode()
