"""How the estimate reads: never more precise than it is."""

from __future__ import annotations

import pytest

from queuegate.pages import eta_text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (-1, "unknown for now"),
        (0, "a few seconds"),
        (10_000, "a few seconds"),
        (10_001, "about 20 seconds"),
        (59_999, "about 60 seconds"),
        (60_000, "about 1 minute"),
        (61_000, "about 2 minutes"),
        (89 * 60_000, "about 89 minutes"),
        (90 * 60_000, "about 2 hours"),
    ],
)
def test_eta_text(ms: int, text: str) -> None:
    assert eta_text(ms) == text
