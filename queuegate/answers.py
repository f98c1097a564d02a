"""What the gate answers itself, in the visitor's language: the waiting page
(or its JSON) and the message pages, built for a room and a request. Used by
the gate's decision and by its own endpoints."""

from __future__ import annotations

from functools import lru_cache

from starlette.types import Scope

from .challenges import Challenges
from .i18n import DEFAULT, MAX_ACCEPT_LANGUAGE, Language, language_for, negotiate
from .options import Settings
from .pages import Headers, Page, Pages
from .settings import Room
from .store import Outcome
from .visitors import Visitors

__all__ = ["GATE_KEY", "UNAVAILABLE_RETRY", "Answers"]

# Where the gate that saw a request leaves itself and the root path it saw
# the request at (its endpoints' links start there), for what runs further in.
GATE_KEY = "queuegate.gate"
UNAVAILABLE_RETRY = 5  # seconds a client should wait after a failed check


def _accept_language(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"accept-language":
            return bytes(value[:MAX_ACCEPT_LANGUAGE]).decode("latin-1")
    return ""


class Answers:
    def __init__(
        self,
        settings: Settings,
        pages: Pages,
        visitors: Visitors,
        counters: dict[str, int],
        challenges: Challenges,
    ) -> None:
        self._settings = settings
        self._challenges = challenges
        self._pages = pages
        self._visitors = visitors
        self._counters = counters
        # Made once per root path and room (bounded: a root path may come
        # from a proxy's header).
        self._urls = lru_cache(maxsize=1024)(self._make_urls)

    def language(self, room: Room | None, scope: Scope) -> Language:
        """The language of the gate's answer: the room's or the gate's fixed
        one, else the visitor's (Accept-Language), else English."""
        code = (room.language if room is not None else None) or self._settings.language
        if code is None:
            header = _accept_language(scope)
            code = negotiate(header) if header else DEFAULT
        return language_for(code)

    def line_page(
        self,
        room: Room,
        outcome: Outcome,
        as_json: bool,
        scope: Scope,
        status: int | None = None,
        rejoined: bool = False,
    ) -> Page:
        status_url, leave_url, stream_url = self._urls(scope[GATE_KEY][1], room.name)
        language = self.language(room, scope)
        return self._pages.waiting(
            "" if as_json else room.title_in(language.code),  # the JSON has no title
            room.name,
            outcome,
            status_url=status_url,
            leave_url=leave_url,
            as_json=as_json,
            status=status,
            language=language,
            stream_url=stream_url,
            rejoined=rejoined,
        )

    def _make_urls(self, root_path: str, room: str) -> tuple[str, str, str]:
        """A room's status, leave and stream URLs under ``root_path``."""
        base = root_path + self._settings.endpoint
        return f"{base}/status/{room}", f"{base}/leave/{room}", f"{base}/stream/{room}"

    def challenge(self, room: Room, outcome: Outcome, scope: Scope, as_json: bool) -> Page:
        """A new challenge at the outcome's difficulty, to solve before a place."""
        language = self.language(room, scope)
        return self._pages.challenge(
            room.title_in(language.code),
            room.name,
            self._challenges.issue(room.name, outcome.difficulty),
            join_url=f"{scope[GATE_KEY][1]}{self._settings.endpoint}/join/{room.name}",
            as_json=as_json,
            language=language,
        )

    def message(
        self, kind: str, room: Room, scope: Scope, status: int, as_json: bool, retry_after: int | None = None
    ) -> Page:
        language = self.language(room, scope)
        # Having left, the visitor is sent on: a link to the site's home page.
        home = (scope.get("root_path", "") + "/") if kind == "left" else None
        return self._pages.message(
            kind,
            room.name,
            status=status,
            as_json=as_json,
            retry_after=retry_after,
            language=language,
            home=home,
            title=room.title_in(language.code),
        )

    def unavailable(self, room: Room, scope: Scope, as_json: bool) -> Page:
        return self.message("unavailable", room, scope, 503, as_json, UNAVAILABLE_RETRY)

    def refused(self, room: Room, scope: Scope, as_json: bool) -> tuple[Page, Headers]:
        # The cookie is cleared: next time this browser is simply a newcomer.
        self._counters["refused"] += 1
        return self.message("refused", room, scope, 403, as_json), [self._visitors.clear_cookie(scope, room)]
