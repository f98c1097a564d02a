"""Queue tokens: a random visitor id in a signed, timestamped cookie value.

The token holds the id, its issue time and, for an identified user, a keyed
hash of the user id (never the id itself), which binds the place to that user.
Once the visitor is admitted it also holds the end of the admission (Redis
time, ms), so that the gate can let the visitor on through a Redis outage;
where the operator binds cookies to clients, a short keyed hash of the
client's coarse fingerprint; and while the visitor waits, their arrival
number and when their liveness was last recorded (Redis time, ms), so that
a poll from far back can be answered without asking Redis
(``queuegate.farback``). Each room signs with its own salt, so a token
from one room is worthless in another. A token that fails in any way
(tampered, truncated, too old, foreign room, retired key) reads as ``None``:
the visitor is simply new.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from itsdangerous import BadData, SignatureExpired, TimestampSigner
from itsdangerous.encoding import base64_encode, int_to_bytes, want_bytes

__all__ = ["Token", "Tokens", "new_visitor_id"]

logger = logging.getLogger("queuegate")

VERIFIED_CACHE = 100_000  # tokens remembered per process (about 20 MB at most)
SIGNATURE_LENGTH = 43  # an HMAC-SHA256 in URL-safe base64, unpadded
FOREIGN_LOG_INTERVAL = 60.0  # s: cookies signed with no key of ours are logged this often at most
# HMAC's pads (RFC 2104), as byte translations of the key.
_INNER_PAD = bytes(x ^ 0x36 for x in range(256))
_OUTER_PAD = bytes(x ^ 0x5C for x in range(256))
_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def new_visitor_id() -> str:
    """96 random bits, URL-safe, 16 characters: short to keep Redis small.
    Never starting with '-', so an operator can pass it to a command line."""
    while True:
        # secrets.token_urlsafe(12), without its Python layers (a newcomer's
        # every request makes one).
        visitor = binascii.b2a_base64(os.urandom(12), newline=False).translate(_URL_SAFE).decode()
        if not visitor.startswith("-"):
            return visitor


@dataclass(frozen=True, slots=True)
class Token:
    visitor: str
    user_hash: str | None = None  # the signed-in user it belongs to
    until_ms: int = 0  # the admission's end (Redis time), 0 = not admitted
    binding: str = ""  # the client fingerprint it is bound to, "" = none
    place: int = 0  # the waiting visitor's arrival number, 0 = none
    seen_ms: int = 0  # when their liveness was last recorded (Redis time)


class _Signer(TimestampSigner):
    """itsdangerous's TimestampSigner, signing with a third of the work and
    the same result: it derives the key (a hash of salt and secret) and keys
    a new HMAC on every signature, and encodes the timestamp each time. Here
    the newest key is derived once, its HMAC's inner and outer hashes are
    started once (RFC 2104: each signature copies them, four C calls where
    ``hmac``'s copy and digest run its Python methods), and the timestamp is
    encoded once a second. Verifying is itsdangerous's own
    (``tests/test_tokens.py`` checks each against the other)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._derived: dict[str | bytes | None, bytes] = {}
        key = self.derive_key()
        block = self.digest_method().block_size
        if len(key) > block:
            key = self.digest_method(key).digest()
        key = key.ljust(block, b"\0")
        self._inner = self.digest_method(key.translate(_INNER_PAD))
        self._outer = self.digest_method(key.translate(_OUTER_PAD))
        self._stamp: tuple[int, bytes] = (-1, b"")  # a second, and its encoding after the separator

    def derive_key(self, secret_key: str | bytes | None = None) -> bytes:
        derived = self._derived.get(secret_key)
        if derived is None:
            derived = self._derived[secret_key] = super().derive_key(secret_key)
        return derived

    def sign(self, value: str | bytes) -> bytes:
        now = self.get_timestamp()
        second, stamp = self._stamp
        if second != now:
            stamp = self.sep + base64_encode(int_to_bytes(now))
            self._stamp = (now, stamp)  # one assignment: threads see a pair that goes together
        signed = want_bytes(value) + stamp
        inner = self._inner.copy()
        inner.update(signed)
        outer = self._outer.copy()
        outer.update(inner.digest())
        # itsdangerous's base64_encode, without its Python layers.
        mac = binascii.b2a_base64(outer.digest(), newline=False).translate(_URL_SAFE).rstrip(b"=")
        return signed + self.sep + mac


class Tokens:
    def __init__(self, secret_keys: Sequence[str], max_age: int) -> None:
        # itsdangerous signs with the last key and verifies with all of them;
        # our settings list the newest first.
        self._keys = [key.encode() for key in reversed(secret_keys)]
        self._user_keys = [hashlib.sha256(b"queuegate.user." + key).digest() for key in reversed(self._keys)]
        self._client_keys = [
            hashlib.sha256(b"queuegate.client." + key).digest() for key in reversed(self._keys)
        ]
        self.max_age = max_age
        self._signer = lru_cache(maxsize=4096)(self._make_signer)
        self._verified: dict[tuple[str, str], tuple[Token, float]] = {}
        # Well-formed tokens whose signature none of the keys made: processes
        # signing with different secret keys, a key retired too early, or
        # edited cookies. Counted, and said in the log once a minute at most.
        self.foreign = 0
        self._foreign_said = (0, -FOREIGN_LOG_INTERVAL)  # (the count, time.monotonic()) when last said
        self._foreign_last = ("", "")  # (room, token) last counted

    def _make_signer(self, room: str) -> TimestampSigner:
        return _Signer(self._keys, salt=f"queuegate.room.{room}", digest_method=hashlib.sha256)

    def user_hash(self, user_id: str, key: bytes | None = None) -> str:
        """A keyed hash standing for a user id in tokens and Redis keys (made
        with the newest secret key)."""
        key = self._user_keys[0] if key is None else key
        return hmac.new(key, user_id.encode(), hashlib.sha256).hexdigest()[:32]

    def is_user(self, user_hash: str, user_id: str) -> bool:
        """Whether a token's user hash stands for ``user_id`` under any key."""
        return any(hmac.compare_digest(user_hash, self.user_hash(user_id, k)) for k in self._user_keys)

    def fingerprint(self, client: bytes, key: bytes | None = None) -> str:
        """A short keyed hash of a client's coarse fingerprint (its network,
        its User-Agent), made with the newest secret key."""
        key = self._client_keys[0] if key is None else key
        return hmac.new(key, client, hashlib.sha256).hexdigest()[:12]

    def is_fingerprint(self, binding: str, client: bytes) -> bool:
        """Whether a token's binding stands for ``client`` under any key."""
        return any(hmac.compare_digest(binding, self.fingerprint(client, k)) for k in self._client_keys)

    def issue(
        self,
        room: str,
        visitor_id: str,
        user_hash: str | None = None,
        until_ms: int = 0,
        binding: str = "",
        place: int = 0,
        seen_ms: int = 0,
    ) -> str:
        return self.signed(room, visitor_id, user_hash, until_ms, binding, place, seen_ms).decode()

    def signed(
        self,
        room: str,
        visitor_id: str,
        user_hash: str | None = None,
        until_ms: int = 0,
        binding: str = "",
        place: int = 0,
        seen_ms: int = 0,
    ) -> bytes:
        """:meth:`issue`'s token, as the bytes it is signed in (for the cookie's header)."""
        # visitor~user~until~binding~place~seen, empty fields at the end left
        # out (a token made before 2026-11-22 is "visitor" or "visitor~user");
        # a number is written when it is not 0. One f-string: a list of the
        # fields and their join cost a join 3,000 instructions more.
        value = f"{visitor_id}~{user_hash or ''}~{until_ms or ''}~{binding}~{place or ''}~{seen_ms or ''}"
        return self._signer(room).sign(value.rstrip("~"))

    def read(self, room: str, token: str) -> Token | None:
        """The :class:`Token` of a valid token for this room, else ``None``."""
        found = self.verified(room, token)
        return None if found is None else found[0]

    def verified(self, room: str, token: str) -> tuple[Token, float] | None:
        """The :class:`Token` of a valid token for this room and when it was
        issued (``time.time()``: it is valid until ``max_age`` seconds
        later), else ``None``.

        A token that verified once is remembered with its issue time (checking
        an HMAC costs more than the rest of a gated request), so later reads
        only check its age. Only valid tokens are remembered."""
        known = self._verified.get((room, token))
        if known is not None:
            if time.time() - known[1] <= self.max_age:
                return known
            del self._verified[(room, token)]
            return None
        try:
            value, issued = self._signer(room).unsign(token, max_age=self.max_age, return_timestamp=True)
            visitor, user_hash, until, binding, place, seen, *_ = [*value.decode().split("~"), *[""] * 5]
            found = Token(
                visitor,
                user_hash or None,
                int(until) if until else 0,
                binding,
                int(place) if place else 0,
                int(seen) if seen else 0,
            )
        except SignatureExpired:
            return None  # ours, too old
        except BadData:
            self._foreign(room, token)
            return None
        except (UnicodeError, ValueError):
            return None
        if len(self._verified) >= VERIFIED_CACHE:
            self._verified.clear()
        known = self._verified[(room, token)] = (found, issued.timestamp())
        return known

    def _foreign(self, room: str, token: str) -> None:
        """Count a token that failed, if its signature has the form of ours
        but none of our keys made it (not one expired, or malformed)."""
        if (room, token) == self._foreign_last:
            return  # the same request's cookie read again (a request may read it twice)
        value, dot, mac = token.rpartition(".")
        if not dot or len(mac) != SIGNATURE_LENGTH or self._signer(room).verify_signature(value, mac):
            return
        self._foreign_last = (room, token)
        self.foreign += 1
        count, at = self._foreign_said
        now = time.monotonic()
        if now - at < FOREIGN_LOG_INTERVAL:
            return
        self._foreign_said = (self.foreign, now)
        logger.warning(
            "queuegate: %d cookie(s) since the last such message (this one of room %r) were signed, "
            "but with none of this process's secret keys. If the app's processes have different "
            "secret_key (QUEUEGATE_SECRET_KEY), visitors lose their place each time they move between "
            "them: give every process the same key. Else a key was retired while its cookies were "
            "still in use, or someone edits cookies (they count as no cookie).",
            self.foreign - count,
            room,
        )
