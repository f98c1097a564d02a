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
from importlib.resources import files
from string import Template
from typing import Any

from .store import Outcome

__all__ = ["Page", "Pages", "eta_text"]

Headers = list[tuple[bytes, bytes]]

MESSAGES = {
    "closed": (
        "This line is closed",
        "Nobody new can join right now: it may be sold out or over. Please come back later.",
    ),
    "unavailable": (
        "Temporarily unavailable",
        "We cannot check the line right now. This page will try again in a few seconds.",
    ),
    "left": (
        "You left the line",
        "Your place has been given up. Coming back puts you at the end of the line.",
    ),
    "not_found": ("Not found", "There is no such waiting room."),
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


class Pages:
    """Builds the gate's own responses.

    ``waiting_template`` replaces the waiting page: a ``string.Template`` text
    with the placeholders ``$title``, ``$position``, ``$ahead_text``,
    ``$eta_text``, ``$updated``, ``$status_url``, ``$leave_url`` and
    ``$poll_seconds`` (all HTML-escaped).
    """

    def __init__(self, waiting_status: int, waiting_template: str | None = None) -> None:
        self.waiting_status = waiting_status
        waiting = waiting_template if waiting_template is not None else _template("waiting.html")
        message = _template("message.html")
        self._waiting = Template(waiting)
        self._message = Template(message)
        common: Headers = [
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
        ]
        self._json_headers = [*common, (b"content-type", b"application/json")]
        self._waiting_headers = [
            *common,
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", _csp(waiting)),
        ]
        self._message_headers = [
            *common,
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", _csp(message)),
        ]

    @staticmethod
    def _json(status: int, headers: Headers, payload: Mapping[str, Any]) -> Page:
        return Page(status, headers, json.dumps(payload, separators=(",", ":")).encode())

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
        status = self.waiting_status if status is None else status
        eta_seconds = None if outcome.eta_ms < 0 else math.ceil(outcome.eta_ms / 1000)
        poll = max(1, math.ceil(outcome.poll_ms / 1000))
        headers = [(b"retry-after", str(poll).encode())]
        facts = {
            "position": outcome.rank + 1,
            "ahead_text": _ahead_text(outcome.rank),
            "eta_text": eta_text(outcome.eta_ms),
        }
        if as_json:
            return self._json(
                status,
                [*self._json_headers, *headers],
                {
                    "room": room,
                    "state": "waiting",
                    "ahead": outcome.rank,
                    "line": outcome.line,
                    "eta_seconds": eta_seconds,
                    "poll_after_seconds": poll,
                    **facts,
                },
            )
        updated = time.strftime("%H:%M:%S UTC", time.gmtime(outcome.now_ms / 1000))
        values = {
            "title": title,
            "status_url": status_url,
            "leave_url": leave_url,
            "poll_seconds": poll,
            "updated": updated,
            **facts,
        }
        body = self._waiting.safe_substitute({k: html.escape(str(v)) for k, v in values.items()})
        return Page(status, [*self._waiting_headers, *headers], body.encode())

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
        refresh = "" if retry_after is None else f'<meta http-equiv="refresh" content="{retry_after}">'
        body = self._message.safe_substitute(
            heading=html.escape(heading), message=html.escape(message), refresh=refresh
        )
        return Page(status, [*self._message_headers, *extra], body.encode())
