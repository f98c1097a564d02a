"""What the gate answers itself: the waiting page, message pages and JSON.

Templates are read and their fixed headers built once, at start-up. Every
value put into HTML is escaped; the page's own script gets a CSP hash so no
other script can run on it. Pages speak the visitor's language (see
``queuegate.i18n``): each template's fixed texts are ``$t_...`` placeholders
filled from the language's catalog, and the texts a page's script shows
travel in data attributes, so the script (and its hash) is the same in every
language.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib.resources import files
from string import Template
from typing import Any, NamedTuple

from starlette.types import Send

from .compiled import Compiled
from .i18n import DEFAULT, Language, language_for
from .outcomes import PAUSED_ETA
from .store import Outcome
from .texts import BACK_HOME, HEADINGS, LOTTERY_AHEAD, MESSAGE_STATES, MESSAGES, RETRYING, TAB_TITLE, TEXTS

__all__ = ["Page", "Pages", "eta_text", "send_page"]

Headers = list[tuple[bytes, bytes]]
# Made once (json.dumps with options makes one per call); UTF-8 as it is
# (RFC 8259), not six bytes per character of a visitor's language.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=8192)
def _json_text(value: str) -> str:
    """A string as JSON (the waiting answer's texts repeat: rooms, URLs,
    a few dozen estimates and places per language)."""
    return _JSON.encode(value)


@lru_cache(maxsize=1024)
def _json_parts(room: str, method: str, status_url: str, stream_url: str, tag: str) -> tuple[str, str]:
    """The waiting answer's JSON up to its people ahead, and from its poll
    interval to its position: the same for every poll of a room's line in
    one language (see ``Pages.waiting``)."""
    head = f'{{"room":{_json_text(room)},"state":"waiting","method":{_json_text(method)},"ahead":'
    middle = (
        f',"status_url":{_json_text(status_url)},"stream_url":{_json_text(stream_url)}'
        f',"language":{_json_text(tag)},"position":'
    )
    return head, middle


def _link(href: str, text: str) -> str:
    return f'<p class="back"><a href="{html.escape(href)}">{html.escape(text)}</a></p>'


class Page(NamedTuple):
    """A response the gate sends itself (a tuple: one is made for every
    poll, and a frozen dataclass sets each field through object.__setattr__)."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes


async def send_page(page: Page, send: Send, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    headers = [*page.headers, *extra, (b"content-length", str(len(page.body)).encode())]
    await send({"type": "http.response.start", "status": page.status, "headers": headers})
    await send({"type": "http.response.body", "body": page.body})


def eta_text(eta_ms: int, language: Language | None = None) -> str:
    """The estimate as people read it; never more precise than it is."""
    return (language or language_for(DEFAULT)).eta_text(eta_ms)


# A page's values are mostly the same from one visitor to the next (title,
# links, labels, estimates, the clock's second): escaped and formatted once.
_escaped = lru_cache(maxsize=4096)(html.escape)
_escape = html.escape  # a value new to every answer: the cache would only churn


@lru_cache(maxsize=64)
def _texts(language: Language) -> dict[str, str]:
    """A language's fixed texts, escaped, as template values (and lang, dir)."""
    texts = {f"t_{name}": html.escape(language.text(message)) for name, message in TEXTS.items()}
    return {**texts, "lang": language.tag, "dir": language.dir}


@lru_cache(maxsize=64)
def _labels(language: Language, lottery: bool) -> tuple[tuple[str, str], ...]:
    """The waiting page's labels of its two figures, in a FIFO line or a draw."""
    return (
        ("position_label", language.text(TEXTS["draw_label" if lottery else "place_label"])),
        ("ahead_label", language.text(TEXTS["next_label" if lottery else "ahead_label"])),
    )


@lru_cache(maxsize=64)
def _rejoined(language: Language) -> str:
    """The waiting page's note to one who lost their place and joined again."""
    return f'<p class="notice">{html.escape(language.text(TEXTS["rejoined"]))}</p>'


def _with_title(values: dict[str, str], language: Language) -> dict[str, str]:
    """Escaped ``values`` (the room's ``title`` among them), with the title as
    the built-in pages show it: ``$room_line``, a line under the heading,
    and ``$tab_<heading>`` (``HEADINGS``), the tab's title: the heading and
    the title as the language joins them (``TAB_TITLE``). A room without a
    title shows neither: its name is the operator's, not the visitor's."""
    title = values.get("title", "")
    values["room_line"] = f'<p class="room">{title}</p>' if title else ""
    for name in HEADINGS:
        values[f"tab_{name}"] = _tab(language, title, name)
    return values


@lru_cache(maxsize=1024)
def _tab(language: Language, title: str, name: str) -> str:
    """The tab's title for the heading ``name`` (``TEXTS``) and the room's
    ``title`` (escaped, or ""), escaped: the heading alone, or both as the
    language joins them (``TAB_TITLE``)."""
    heading = html.escape(language.text(TEXTS[name]))
    return html.escape(language.text(TAB_TITLE)).format(heading=heading, title=title) if title else heading


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
    with the placeholders ``$title`` (the room's, empty if it has none;
    ``$room_line`` is the built-in page's line for it), ``$position``,
    ``$ahead_text``, ``$eta_text``, ``$line_state`` (``paused`` while the
    line is paused, else empty), ``$heading`` and ``$tab`` (the heading and
    the tab's title, which say when the line is paused), ``$notice`` (the note to one who lost a
    place and joined again, else empty), ``$position_label``, ``$ahead_label``, ``$updated``,
    ``$status_url``, ``$leave_url`` and ``$poll_seconds`` (all HTML-escaped),
    and ``$style``, the built-in page's stylesheet.
    """

    def __init__(self, waiting_status: int, waiting_template: str | None = None) -> None:
        self.waiting_status = waiting_status
        waiting = waiting_template if waiting_template is not None else _template("waiting.html")
        message = _template("message.html")
        prequeue = _template("prequeue.html")
        challenge = _template("challenge.html")
        self._challenge = Compiled.of(Template(challenge))
        # The line pages share one stylesheet, put in as it is (it is ours, not
        # a value to escape).
        self._style = _template("line.css")
        self._waiting = Compiled.of(Template(waiting))
        self._message = Compiled.of(Template(message))
        self._prequeue_page = Compiled.of(Template(prequeue))
        # Each template in each language, its fixed texts and stylesheet in.
        self._in_language = lru_cache(maxsize=256)(self._bind)
        # And with each room's values in (a key per room, language, page and
        # root path; bounded, as a root path may come from a proxy).
        self._for_room = lru_cache(maxsize=1024)(self._bind_room)
        # And the waiting page with the moment's values in too (the clock's
        # second, the poll interval): every answer of that second in that
        # room and language fills only its own place, people ahead and
        # estimate. A storm of joins renders the page once a second.
        self._for_moment = lru_cache(maxsize=256)(self._bind_moment)
        # Each answer's headers, by kind, poll interval and language.
        self._line_headers = lru_cache(maxsize=1024)(self._make_line_headers)
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
        self._challenge_headers = [
            *common,
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", _csp(challenge)),
        ]

    @staticmethod
    def _json(status: int, headers: Sequence[tuple[bytes, bytes]], payload: Mapping[str, Any]) -> Page:
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
        language: Language | None = None,
        stream_url: str = "",
        rejoined: bool = False,
    ) -> Page:
        """The waiting page or JSON for a ``waiting`` or ``prequeue`` outcome,
        in ``language`` (default English); ``rejoined``: the visitor had a
        place, lost it (skipped as gone, removed, the line drained) and has
        just taken a new one at the end, and is told so."""
        language = language or language_for(DEFAULT)
        status = self.waiting_status if status is None else status
        poll = max(1, math.ceil(outcome.poll_ms / 1000))
        headers = self._line_headers(as_json, poll, language.tag)  # copied as it is sent
        if outcome.state == "prequeue":
            return self._prequeue(
                title, room, outcome, status, headers, poll, status_url, leave_url, as_json, language
            )
        lottery = outcome.method == "random"
        paused = outcome.eta_ms == PAUSED_ETA
        if as_json:
            eta_text = language.eta_text(outcome.eta_ms)
            ahead_text = language.text(LOTTERY_AHEAD) if lottery else language.ahead_text(outcome.rank)
            # What _JSON.encode makes of the payload {"room": room, "state":
            # "waiting", "method", "ahead", "line", "eta_seconds",
            # "poll_after_seconds", "status_url", "stream_url", "language",
            # "position", "ahead_text", "eta_text", "paused"}, written out:
            # the encoder was a third of a status poll's time in the gate
            # (tests/test_pages.py compares both).
            eta_seconds = "null" if outcome.eta_ms < 0 else str(math.ceil(outcome.eta_ms / 1000))
            head, middle = _json_parts(room, outcome.method, status_url, stream_url, language.tag)
            text = "".join(
                (
                    head,
                    "null" if lottery else str(outcome.rank),
                    ',"line":',
                    str(outcome.line),
                    ',"eta_seconds":',
                    eta_seconds,
                    ',"poll_after_seconds":',
                    str(poll),
                    middle,
                    "null" if lottery else str(outcome.rank + 1),
                    ',"ahead_text":',
                    _json_text(ahead_text),
                    ',"eta_text":',
                    _json_text(eta_text),
                    ',"paused":true' if paused else ',"paused":false',
                    ',"rejoined":true}' if rejoined else ',"rejoined":false}',
                )
            )
            return Page(status, headers, text.encode())
        # Its key flat: a tuple of tuples is hashed again, pair by pair, at
        # every lookup.
        moment = self._for_moment(
            language, title, status_url, leave_url, stream_url, lottery, paused, poll, outcome.now_ms // 1000
        )
        # Only the answer's own values are left: each escaped (a place and
        # the people ahead are new for every newcomer, made escaped by the
        # language; the cache is for the texts that repeat).
        own = {
            "position": language.number_html(outcome.line if lottery else outcome.rank + 1),
            "ahead_text": (
                _escaped(language.text(LOTTERY_AHEAD)) if lottery else language.ahead_html(outcome.rank)
            ),
            "eta_text": language.eta_html(outcome.eta_ms),
            "notice": _rejoined(language) if rejoined else "",
        }
        return Page(status, headers, moment.fill(own))

    def _prequeue(
        self,
        title: str,
        room: str,
        outcome: Outcome,
        status: int,
        headers: Sequence[tuple[bytes, bytes]],
        poll: int,
        status_url: str,
        leave_url: str,
        as_json: bool,
        language: Language,
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
                "language": language.tag,
            }
            return self._json(status, headers, payload)
        seconds = math.ceil(opens_in / 1000)
        room_values = (("title", title), ("status_url", status_url), ("leave_url", leave_url))
        values = {
            "poll_seconds": str(poll),
            "updated": language.clock(outcome.now_ms // 1000),
            "opens_in_ms": str(opens_in),
            "countdown": f"{seconds // 60}:{seconds % 60:02d}",
            "line": language.number(outcome.line),
            "opens_at": language.clock(outcome.opens_at_ms // 1000),
            "seed_sha256": outcome.seed_sha256,
        }
        return Page(status, headers, self._render(self._prequeue_page, language, room_values, values))

    def _render(
        self,
        template: Compiled,
        language: Language,
        room_values: tuple[tuple[str, str], ...],
        values: Mapping[str, str],
    ) -> bytes:
        """``template`` in ``language`` with a room's values (its title, its
        links, labels: the same for every visitor of the room, put in once)
        and a response's own ``values``, all escaped."""
        bound = self._for_room(template, language, room_values)
        return bound.fill({name: _escaped(value) for name, value in values.items()})

    def _bind_moment(
        self,
        language: Language,
        title: str,
        status_url: str,
        leave_url: str,
        stream_url: str,
        lottery: bool,
        paused: bool,
        poll: int,
        second: int,
    ) -> Compiled:
        """The waiting page in ``language`` with a room's values (its title,
        links, labels for a line or a draw, paused or not) and the moment's
        (the poll interval, the clock's ``second``) in."""
        room_values = (
            ("title", title),
            ("status_url", status_url),
            ("leave_url", leave_url),
            ("stream_url", stream_url),
            *_labels(language, lottery),
        )
        bound = self._for_room(self._waiting, language, room_values)
        heading = "paused_heading" if paused else "in_line"
        return bound.bind(
            {
                "poll_seconds": html.escape(str(poll)),
                "updated": html.escape(language.clock(second)),
                "line_state": "paused" if paused else "",
                "heading": _texts(language)[f"t_{heading}"],
                "tab": _tab(language, _escaped(title), heading),
            }
        )

    def _make_line_headers(self, as_json: bool, poll: int, tag: str) -> tuple[tuple[bytes, bytes], ...]:
        return (
            *(self._json_headers if as_json else self._waiting_headers),
            (b"retry-after", str(poll).encode()),
            (b"content-language", tag.encode()),
        )

    def _bind(self, template: Compiled, language: Language) -> Compiled:
        return template.bind({**_texts(language), "style": self._style})

    def _bind_room(
        self, template: Compiled, language: Language, room_values: tuple[tuple[str, str], ...]
    ) -> Compiled:
        return self._in_language(template, language).bind(
            _with_title({name: html.escape(value) for name, value in room_values}, language)
        )

    def challenge(
        self,
        title: str,
        room: str,
        challenge: Mapping[str, Any],
        *,
        join_url: str,
        as_json: bool,
        language: Language | None = None,
    ) -> Page:
        """A proof of work to do before a place (see ``queuegate.challenges``):
        the page that does it by itself, or the challenge in JSON."""
        language = language or language_for(DEFAULT)
        extra: Headers = [(b"content-language", language.tag.encode())]
        if as_json:
            payload = {
                "room": room,
                "state": "challenge",
                "challenge": challenge,
                "join_url": join_url,
                "title": language.text(TEXTS["check_heading"]),
                "message": language.text(TEXTS["check_note"]),
                "language": language.tag,
            }
            return self._json(self.waiting_status, [*self._json_headers, *extra], payload)
        escaped = _with_title(
            {
                "title": _escaped(title),
                "join_url": _escaped(join_url),
                "challenge": html.escape(_JSON.encode(challenge)),  # new each time: not cached
            },
            language,
        )
        body = self._in_language(self._challenge, language).fill(escaped)
        return Page(self.waiting_status, [*self._challenge_headers, *extra], body)

    def state(self, room: str, state: str, status: int = 200, **extra: Any) -> Page:
        """A JSON state for the status endpoint (active, pass, none)."""
        return self._json(status, self._json_headers, {"room": room, "state": state, **extra})

    def message(
        self,
        kind: str,
        room: str,
        *,
        status: int,
        as_json: bool,
        retry_after: int | None = None,
        language: Language | None = None,
        home: str | None = None,
        title: str = "",
    ) -> Page:
        """Closed, unavailable, left, not found: a short page or JSON; with
        ``home`` (the site's home page), a link back to it; with the room's
        ``title``, the room named under the heading and in the tab, as the
        waiting page names it."""
        language = language or language_for(DEFAULT)
        extra: Headers = [(b"content-language", language.tag.encode())]
        if retry_after is not None:
            extra.append((b"retry-after", str(retry_after).encode()))
        heading, message = (language.text(text) for text in MESSAGES[kind])
        if as_json:
            state, more = MESSAGE_STATES.get(kind, (kind, {}))
            payload: dict[str, Any] = {
                "room": room,
                "state": state,
                **more,
                "title": heading,
                "message": message,
            }
            if retry_after is not None:
                payload["retry_after_seconds"] = retry_after
            return self._json(status, [*self._json_headers, *extra], payload)
        # Without JavaScript a timed refresh is the only way the page can try
        # again; with it, the visitor sees the countdown and can stop it.
        retry = refresh = ""
        if retry_after is not None:
            refresh = f'<noscript><meta http-equiv="refresh" content="{retry_after}"></noscript>'
            seconds = f'<span id="qg-seconds">{retry_after}</span>'
            retry = html.escape(language.text(RETRYING)).replace("{seconds}", seconds)
        escaped_title = html.escape(title)
        tab = html.escape(heading)
        if title:
            tab = html.escape(language.text(TAB_TITLE)).format(heading=tab, title=escaped_title)
        body = self._in_language(self._message, language).fill(
            {
                "heading": html.escape(heading),
                "tab": tab,
                "room_line": f'<p class="room">{escaped_title}</p>' if title else "",
                "message": html.escape(message),
                "refresh": refresh,
                "retry": "" if retry_after is None else str(retry_after),
                "t_retrying": retry,
                "back": "" if home is None else _link(home, language.text(BACK_HOME)),
            }
        )
        return Page(status, [*self._message_headers, *extra], body)
