"""Check a draw: recompute a pre-queue's order from the published seed.

At a scheduled opening, everyone in the pre-queue gets the place given by the
rank of ``SHA1(seed + ":" + visitor_id)`` (hex, ties by id) among them; this
is the same rule as in ``scripts/advance.lua``. Before the opening the waiting
page shows ``SHA-256(seed)``; after it the operator publishes the seed
(``queuegate seed ROOM --yes``), and anyone can run this to see that the order was
not rigged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["prequeue_order", "seed_commitment"]


def seed_commitment(seed: str) -> str:
    """The SHA-256 shown before the opening."""
    return hashlib.sha256(seed.encode()).hexdigest()


def prequeue_order(seed: str, visitor_ids: Iterable[str]) -> list[str]:
    """The order the opening gives the visitors of a pre-queue, first first."""

    def key(visitor: str) -> tuple[str, str]:
        return hashlib.sha1(f"{seed}:{visitor}".encode()).hexdigest(), visitor

    return sorted(visitor_ids, key=key)
