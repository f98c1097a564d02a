"""What the gate answers itself: the waiting page, message pages and JSON.

Templates are read and their fixed headers built once, at start-up. Every
value put into HTML is escaped; the page's own script gets a CSP hash so no
other script can run on it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from string import Template
from typing import Any

from .store import Outcome

__all__ = ["Page", "Pages", "eta_text"]

Headers = list[tuple[bytes, bytes]]
_JSON = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps with options makes one per call

MESSAGES = {
    "closed": (
        "This line is closed",
        "Nobody new can join right now: it may be sold out or over. Please come back later.",
    ),
    "unavailable": (
        "Temporarily unavailable",
        "We cannot check the line right now. Please try again in a few seconds.",
    ),
    "left": (
        "You left the line",
        "Your place has been given up. Coming back puts you at the end of the line.",
    ),
    "not_found": ("Not found", "There is no such waiting room."),
    "not_admitted": (
        "Not your turn yet",
        "Only visitors whose turn has come can connect here. Open the page to join the line.",
    ),
    "cross_site": (
        "Not allowed from another site",
        "Leaving the line can only be asked for from this site's own waiting page.",
    ),
    "limited": (
        "Too many new places from your network",
        "So many places in this line were just taken from your network that we cannot give another "
        "one right now. Please try again in a minute.",
    ),
    "refused": (
        "This place belongs to someone else",
        "This place in line was taken by another account. Sign in with the account that joined, "
        "or open the page again to join the line yourself.",
    ),
}


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    headers: Headers
    body: bytes


def eta_text(eta_ms: int) -> str:
    """The estimate as people read it; never more precise than it is."""
    if eta_ms < 0:
        return "unknown for now"
    if eta_ms <= 10_000:
        return "a few seconds"
    if eta_ms < 60_000:
        return f"about {math.ceil(eta_ms / 10_000) * 10} seconds"
    minutes = math.ceil(eta_ms / 60_000)
    if minutes < 90:
        return f"about {minutes} minute{'s' if minutes != 1 else ''}"
    return f"about {math.ceil(minutes / 60)} hours"


# A page's values are mostly the same from one visitor to the next (title,
# links, labels, estimates, the clock's second): escaped and formatted once.
_escaped = lru_cache(maxsize=4096)(html.escape)


@lru_cache(maxsize=16)
def _clock(second: int) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(second))


def _ahead_text(ahead: int) -> str:
    if ahead == 0:
        return "nobody: you are next"
    return f"{ahead} {'person' if ahead == 1 else 'people'}"


def _template(name: str) -> str:
    return files(__package__).joinpath("templates", name).read_text(encoding="utf-8")


def _csp(template: str) -> bytes:
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in re.findall(r"<script>(.*?)</script>", template, flags=re.S)
    ]
    scripts = " ".join(hashes) or "'none'"
    return (
        "default-src 'none'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; "
        f"base-uri 'none'; frame-ancestors 'none'; script-src {scripts}"
    ).encode()


class _Compiled:
    """A ``string.Template`` cut at its placeholders once: filling it in is a
    join, not a regex pass per response. Same result as ``safe_substitute``
    (``$$`` is ``$``; a placeholder without a value stays as written)."""

    def __init__(self, template: Template) -> None:
        text = template.template
        self._literals: list[str] = []
        self._slots: list[tuple[str, str]] = []  # (name, text as written)
        literal, position = [], 0
        for found in template.pattern.finditer(text):
            literal.append(text[position : found.start()])
            position = found.end()
            name = found.group("named") or found.group("braced")
            if name is None:  # "$$", or a "$" that starts no placeholder
                literal.append("$" if found.group("escaped") is not None else found.group())
                continue
            self._literals.append("".join(literal))
            self._slots.append((name, found.group()))
            literal = []
        literal.append(text[position:])
        self._literals.append("".join(literal))

    def fill(self, values: Mapping[str, str]) -> str:
        parts = [self._literals[0]]
        for (name, written), literal in zip(self._slots, self._literals[1:], strict=True):
            parts.append(values.get(name, written))
            parts.append(literal)
        return "".join(parts)


class Pages:
    """Builds the gate's own responses.

    ``waiting_template`` replaces the waiting page: a ``string.Template`` text
    with the placeholders ``$title``, ``$position``, ``$ahead_text``,
    ``$eta_text``, ``$position_label``, ``$ahead_label``, ``$updated``,
    ``$status_url``, ``$leave_url`` and ``$poll_seconds`` (all HTML-escaped),
    and ``$style``, the built-in page's stylesheet.
    """

    def __init__(self, waiting_status: int, waiting_template: str | None = None) -> None:
        self.waiting_status = waiting_status
        waiting = waiting_template if waiting_template is not None else _template("waiting.html")
        message = _template("message.html")
        prequeue = _template("prequeue.html")
        # The line pages share one stylesheet, put in as it is (it is ours, not
        # a value to escape).
        self._style = _template("line.css")
        self._waiting = _Compiled(Template(waiting))
        self._message = _Compiled(Template(message))
        self._prequeue_page = _Compiled(Template(prequeue))
        common: Headers = [
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
        ]
        self._json_headers = [*common, (b"content-type", b"application/json")]
        # One CSP for both line pages: the hashes of both pages' scripts.
        self._waiting_headers = [
            *common,
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", _csp(waiting + prequeue)),
        ]
        self._message_headers = [
            *common,
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", _csp(message)),
        ]

    @staticmethod
    def _json(status: int, headers: Headers, payload: Mapping[str, Any]) -> Page:
        return Page(status, headers, _JSON.encode(payload).encode())

    def waiting(
        self,
        title: str,
        room: str,
        outcome: Outcome,
        *,
        status_url: str,
        leave_url: str,
        as_json: bool,
        status: int | None = None,
    ) -> Page:
        """The waiting page or JSON for a ``waiting`` or ``prequeue`` outcome."""
        status = self.waiting_status if status is None else status
        poll = max(1, math.ceil(outcome.poll_ms / 1000))
        headers = [*self._json_headers] if as_json else [*self._waiting_headers]
        headers.append((b"retry-after", str(poll).encode()))
        if outcome.state == "prequeue":
            return self._prequeue(title, room, outcome, status, headers, poll, status_url, leave_url, as_json)
        lottery = outcome.method == "random"
        facts: dict[str, Any] = {
            "position": None if lottery else outcome.rank + 1,
            "ahead_text": "a random draw whenever places free up" if lottery else _ahead_text(outcome.rank),
            "eta_text": eta_text(outcome.eta_ms),
        }
        if as_json:
            payload = {
                "room": room,
                "state": "waiting",
                "method": outcome.method,
                "ahead": None if lottery else outcome.rank,
                "line": outcome.line,
                "eta_seconds": None if outcome.eta_ms < 0 else math.ceil(outcome.eta_ms / 1000),
                "poll_after_seconds": poll,
                "status_url": status_url,
                **facts,
            }
            return self._json(status, headers, payload)
        values = {
            **facts,
            "position": outcome.line if lottery else outcome.rank + 1,
            "position_label": "people in the draw" if lottery else "your place in line",
            "ahead_label": "Who goes next" if lottery else "Ahead of you",
        }
        body = self._render(self._waiting, title, outcome, poll, status_url, leave_url, values)
        return Page(status, headers, body)

    def _prequeue(
        self,
        title: str,
        room: str,
        outcome: Outcome,
        status: int,
        headers: Headers,
        poll: int,
        status_url: str,
        leave_url: str,
        as_json: bool,
    ) -> Page:
        opens_in = max(0, outcome.opens_at_ms - outcome.now_ms)
        if as_json:
            payload = {
                "room": room,
                "state": "prequeue",
                "opens_in_ms": opens_in,
                "opens_in_seconds": math.ceil(opens_in / 1000),
                "line": outcome.line,
                "seed_sha256": outcome.seed_sha256,
                "poll_after_seconds": poll,
                "status_url": status_url,
            }
            return self._json(status, headers, payload)
        seconds = math.ceil(opens_in / 1000)
        values = {
            "opens_in_ms": opens_in,
            "countdown": f"{seconds // 60}:{seconds % 60:02d}",
            "line": outcome.line,
            "opens_at": _clock(outcome.opens_at_ms // 1000),
            "seed_sha256": outcome.seed_sha256,
        }
        body = self._render(self._prequeue_page, title, outcome, poll, status_url, leave_url, values)
        return Page(status, headers, body)

    def _render(
        self,
        template: _Compiled,
        title: str,
        outcome: Outcome,
        poll: int,
        status_url: str,
        leave_url: str,
        values: Mapping[str, Any],
    ) -> bytes:
        every = {
            "title": title,
            "status_url": status_url,
            "leave_url": leave_url,
            "poll_seconds": poll,
            "updated": _clock(outcome.now_ms // 1000),
            **values,
        }
        escaped = {k: _escaped(str(v)) for k, v in every.items()}
        return template.fill({**escaped, "style": self._style}).encode()

    def state(self, room: str, state: str, status: int = 200, **extra: Any) -> Page:
        """A JSON state for the status endpoint (active, pass, none)."""
        return self._json(status, self._json_headers, {"room": room, "state": state, **extra})

    def message(
        self, kind: str, room: str, *, status: int, as_json: bool, retry_after: int | None = None
    ) -> Page:
        """Closed, unavailable, left, not found: a short page or JSON."""
        extra: Headers = [] if retry_after is None else [(b"retry-after", str(retry_after).encode())]
        if as_json:
            payload: dict[str, Any] = {"room": room, "state": kind}
            if retry_after is not None:
                payload["retry_after_seconds"] = retry_after
            return self._json(status, [*self._json_headers, *extra], payload)
        heading, message = MESSAGES[kind]
        # Without JavaScript a timed refresh is the only way the page can try
        # again; with it, the visitor sees the countdown and can stop it.
        refresh = (
            ""
            if retry_after is None
            else f'<noscript><meta http-equiv="refresh" content="{retry_after}"></noscript>'
        )
        body = self._message.fill(
            {
                "heading": html.escape(heading),
                "message": html.escape(message),
                "refresh": refresh,
                "retry": "" if retry_after is None else str(retry_after),
            }
        )
        return Page(status, [*self._message_headers, *extra], body.encode())
