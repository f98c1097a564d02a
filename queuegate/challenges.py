"""Proofs of work before a new place: the ALTCHA protocol (version 1).

A room with ``challenge=N`` gives a visitor who has no place a challenge
instead: a random salt and the SHA-256 of ``salt + number`` for a secret
number up to N. The visitor's browser tries numbers until the hash matches
(N/2 hashes on average) and posts the number back to the join endpoint.
Challenges are made and checked by the ``altcha`` library, signed with a key
derived from the gate's secret; the salt carries, under that signature, the
room, the difficulty and an expiry. What no signature can say, that a proof
is used once, is the line's rule and lives in ``enter.lua``: the proof is
spent in the same call that gives the place.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from altcha.v1 import ChallengeOptions, create_challenge, solve_challenge, verify_solution

__all__ = ["CHALLENGE_TTL", "Challenges", "Proof", "solve"]

# How long a challenge may be solved and used: enough for a slow phone at the
# hardest setting, too short to stockpile proofs long before a sale.
CHALLENGE_TTL = 600.0
# A payload larger than this is not one the page made.
MAX_PAYLOAD = 2048


@dataclass(frozen=True, slots=True)
class Proof:
    """A checked solution: ``key`` names it for single use (its challenge
    hash), ``difficulty`` is what it was made for, ``expires_ms`` epoch ms."""

    key: str
    difficulty: int
    expires_ms: int


def _derive(secret: str) -> bytes:
    # Its own key: a challenge's signature is never a valid cookie signature.
    return hmac.new(secret.encode(), b"queuegate challenge v1", hashlib.sha256).digest()


class Challenges:
    """Makes and checks a room's challenges (``secret_keys`` newest first:
    challenges are signed with the first, proofs accepted under any)."""

    def __init__(self, secret_keys: Sequence[str], ttl: float = CHALLENGE_TTL) -> None:
        self._keys = [_derive(secret) for secret in secret_keys]
        self._ttl = ttl

    def issue(self, room: str, difficulty: int) -> dict[str, Any]:
        """A new challenge for ``room``, as the JSON the browser solves:
        ``algorithm``, ``challenge``, ``maxnumber``, ``salt``, ``signature``."""
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=self._ttl)
        made = create_challenge(
            ChallengeOptions(
                algorithm="SHA-256",
                max_number=difficulty,
                hmac_key=self._keys[0],
                expires=expires,
                params={"room": room, "difficulty": str(difficulty)},
            )
        )
        return dict(made.to_dict())

    def check(self, room: str, payload: str) -> Proof | None:
        """The proof in ``payload`` (base64 of the solved challenge's JSON, as
        ALTCHA sends it) if it is solved, signed by us, for ``room`` and not
        expired; None for anything else, however malformed."""
        if not isinstance(payload, str) or len(payload) > MAX_PAYLOAD:
            return None
        try:
            solved = json.loads(base64.b64decode(payload, validate=True))
            salt, challenge, number = solved["salt"], solved["challenge"], solved["number"]
            if not (isinstance(salt, str) and isinstance(challenge, str) and isinstance(number, int)):
                return None
            if not any(verify_solution(solved, key)[0] for key in self._keys):
                return None
            params = parse_qs(salt.partition("?")[2].rstrip("&"), strict_parsing=True)
            (salt_room,) = params["room"]
            (difficulty,) = params["difficulty"]
            (expires,) = params["expires"]
        except (ValueError, KeyError, TypeError):
            return None
        if salt_room != room or not difficulty.isdigit() or not expires.isdigit():
            return None
        return Proof(challenge, int(difficulty), int(expires) * 1000)


def solve(challenge: dict[str, Any]) -> str:
    """The payload that answers ``challenge`` (the JSON the gate sent), as a
    client posts it to the join endpoint. For programs (virtual visitors,
    tests, an app that is no browser); it blocks while it hashes."""
    found = solve_challenge(
        challenge["challenge"], challenge["salt"], challenge["algorithm"], challenge["maxNumber"]
    )
    if found is None:
        raise ValueError("the challenge has no solution in its range")
    fields = {name: challenge[name] for name in ("algorithm", "challenge", "salt", "signature")}
    return base64.b64encode(json.dumps({**fields, "number": found.number}).encode()).decode()
