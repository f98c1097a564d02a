"""How the estimate reads (never more precise than it is), and how a
replacement waiting page is filled in."""

from __future__ import annotations

import html
import json
import math
from string import Template

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuegate.i18n import LANGUAGES, language_for
from queuegate.outcomes import PAUSED_ETA
from queuegate.pages import Pages, eta_text
from queuegate.store import Outcome
from queuegate.texts import LOTTERY_AHEAD


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


def test_each_rooms_values_stay_its_own() -> None:
    """A room's title and links are put into its page once and kept: pages
    of rooms asked in turn each read as string.Template reads them."""
    template = "$title|$status_url|$leave_url|$stream_url|$position|$ahead_label|$poll_seconds"
    pages = Pages(503, template)
    for turn in range(3):
        for room, title in (("a", "Sale <A>"), ("b", "Drop & B"), ("a", "Sale <A>")):
            outcome = Outcome("waiting", 1_763_700_000_000, "v", rank=turn, line=9, eta_ms=-1, poll_ms=5000)
            body = pages.waiting(
                title,
                room,
                outcome,
                status_url=f"/{room}/s",
                leave_url=f"/{room}/l",
                as_json=False,
                stream_url=f"/{room}/e",
                status=200,
            ).body.decode()
            values = {
                "title": title,
                "status_url": f"/{room}/s",
                "leave_url": f"/{room}/l",
                "stream_url": f"/{room}/e",
                "position": turn + 1,
                "ahead_label": "Ahead of you",
                "poll_seconds": 5,
            }
            escaped = {name: html.escape(str(value)) for name, value in values.items()}
            assert body == Template(template).safe_substitute(escaped)


@settings(max_examples=300, deadline=None)
@given(
    rank=st.integers(0, 10**9),
    line=st.integers(0, 10**9),
    eta_ms=st.one_of(st.just(-1), st.just(PAUSED_ETA), st.integers(0, 10**10)),
    poll_ms=st.integers(0, 10**6),
    method=st.sampled_from(["fifo", "random"]),
    room=st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True),
    stream_url=st.sampled_from(["", "/_queuegate/stream/x", '/odd"\\path\u2028']),
    code=st.sampled_from(LANGUAGES),
)
def test_the_waiting_json_is_what_the_json_encoder_makes(
    rank: int, line: int, eta_ms: int, poll_ms: int, method: str, room: str, stream_url: str, code: str
) -> None:
    # The body is written out field by field (a third of a status poll's
    # time was the encoder): it must be, byte for byte, what json makes of
    # the answer's fields, in every language and for every figure.
    language = language_for(code)
    outcome = Outcome("waiting", 1, "v", rank=rank, line=line, eta_ms=eta_ms, poll_ms=poll_ms, method=method)
    page = Pages(503).waiting(
        "Sale", room, outcome, status_url=f"/s/{room}", leave_url="/l", as_json=True,
        language=language, stream_url=stream_url,
    )  # fmt: skip
    lottery = method == "random"
    payload = {
        "room": room,
        "state": "waiting",
        "method": method,
        "ahead": None if lottery else rank,
        "line": line,
        "eta_seconds": None if eta_ms < 0 else math.ceil(eta_ms / 1000),
        "poll_after_seconds": max(1, math.ceil(poll_ms / 1000)),
        "status_url": f"/s/{room}",
        "stream_url": stream_url,
        "language": language.tag,
        "position": None if lottery else rank + 1,
        "ahead_text": language.text(LOTTERY_AHEAD) if lottery else language.ahead_text(rank),
        "eta_text": language.eta_text(eta_ms),
        "paused": eta_ms == PAUSED_ETA,
        "rejoined": False,
    }
    assert page.body == json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
