"""How the estimate reads (never more precise than it is), and how a
replacement waiting page is filled in."""

from __future__ import annotations

import html
from string import Template

import pytest

from queuegate.pages import Pages, eta_text
from queuegate.store import Outcome


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


@pytest.mark.parametrize(
    "template",
    [
        "<h1>$title</h1> you are number ${position}; $ahead_text ahead, $eta_text",
        "costs $$5 $$$position $ ${unknown} $nothing $1 ${title}${title}",
        "no placeholders at all",
        "ends with a dollar $",
    ],
)
def test_replacement_waiting_page_reads_as_string_template_would(template: str) -> None:
    # The page is filled in from parts cut once; it must read exactly as
    # string.Template.safe_substitute reads the same text.
    outcome = Outcome("waiting", 1_763_700_000_000, "v", rank=4, line=9, eta_ms=42_000, poll_ms=5000)
    page = Pages(503, template).waiting(
        "Sale <b>&</b>", "sale", outcome, status_url="/s", leave_url="/l", as_json=False
    )
    values = {
        "title": "Sale <b>&</b>",
        "position": 5,
        "ahead_text": "4 people",
        "eta_text": "about 50 seconds",
        "updated": "04:40:00 UTC",
        "status_url": "/s",
        "leave_url": "/l",
        "poll_seconds": 5,
        "position_label": "your place in line",
        "ahead_label": "Ahead of you",
    }
    escaped = {name: html.escape(str(value)) for name, value in values.items()}
    assert page.body.decode() == Template(template).safe_substitute(escaped)
