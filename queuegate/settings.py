"""A room's settings, checked once at start-up (the gate's own options,
and the environment they may come from, are ``queuegate.options``'s).

Every value is validated when the object is built, so a wrong setting fails
when the app starts, with a message naming the setting, never at the first
request.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

from .checks import (
    ROOM_SETTINGS,
    STATUSES,
    ConfigError,
    check_language,
    check_room_setting,
    unknown_names,
)
from .target import CONTROLLER_SETTINGS, Health

# ConfigError, ROOM_SETTINGS, STATUSES, check_room_setting (queuegate.checks)
# and Health (queuegate.target) are named here too, where callers import them.
__all__ = [
    "ROOM_SETTINGS",
    "STATUSES",
    "ConfigError",
    "Health",
    "Room",
    "check_room_setting",
]

ROOM_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP method is a token (RFC 9110)

FailMode = Literal["closed", "open"]


# How long a room made from a template lives on after its last call, beyond
# its longest session, wait or interval: long enough that nobody inside or in
# line notices, short enough that values typed into URLs do not pile up.
FORGET_MARGIN = 3600.0


@dataclass(frozen=True)
class Room:
    """One waiting line, in front of the paths it protects.

    Admission is by ``rate`` (``rate`` visitors every ``per`` seconds, a token
    bucket that never holds more than ``rate``) and/or by ``capacity`` (at most
    that many active sessions). An admitted visitor may pass for ``session``
    seconds, renewed on each request when ``sliding``. A waiting visitor who
    has not polled for ``abandon`` seconds is skipped when their turn comes
    (0: never; else 3 s or more, as a page asks every second at the quickest).
    ``fail`` says what happens when Redis cannot answer in time: ``closed``
    answers 503, ``open`` lets the request through. ``title`` is the name shown
    to visitors on the waiting page, under its heading and in the tab's title
    (default: none, and the page shows none: ``name`` is the operator's, not
    the visitor's); a mapping gives it per
    language (``{"en": "Summer sale", "ko": "여름 세일"}``). ``language`` fixes
    the room's pages to one language instead of each visitor's own.

    ``client_limit`` is the most new places one client address may take in
    the room per minute (the excess gets 429), so one client cannot fill the
    line; 0 turns it off.

    ``target=Health(p95_ms=400)`` lets admission follow the app's health:
    the rate (or capacity) moves between the target's bounds to keep the
    responses' p95 and error rate under the target (see ``Health``).

    ``challenge`` asks a proof of work before a new place (the browser finds a
    number up to ``challenge`` whose SHA-256 the gate chose: half that many
    hashes on average, done by the page by itself; JSON clients get the
    challenge in JSON). 0, the default, asks none. See ``queuegate.challenges``.

    ``method="random"`` admits by lottery among those waiting instead of by
    arrival. With ``opens_at`` (a time), visitors who come before it wait in a
    pre-queue and get a random order, once, at the opening.

    A room gates every method. ``open_methods`` names those that pass
    ungated (``["OPTIONS"]`` for CORS preflights), compared upper-cased as
    routers compare them; a method left out is gated, so forgetting one
    errs on the safe side. (``methods``, the list of the only methods gated,
    is deprecated: a method it forgot walked past the room.)

    ``paths`` may be empty for a room used only on routes (``queuegate.gated``,
    the FastAPI dependency, the Django decorator): the route says where it is.

    A name with ``{placeholders}`` is a template: ``Room("ticket-{event}",
    paths=["/tickets/{event}/buy*"])`` gives each event its own line, made on
    its first visit. ``accept(values)``, given the placeholders' values, says
    which make a room (others get a 404 from the gate and create nothing); a
    derived room nobody calls for ``forget`` seconds expires with its keys
    (default: its longest session, wait or interval plus an hour; 0 = never).
    A template's ``title`` may be a function of those values that gives each
    room its own title, a string or a mapping of languages
    (``title=lambda values: EVENTS.get(values["event"], "Tickets")``); it gets the
    values as they stand in the room's name (case-folded; a hash for a value
    that is long or not plain), so every process titles a room alike, and
    for any name of the template's form (``accept`` is not asked first).

    These are the room's defaults; values changed at run time (see
    ``RoomControl.configure``) are kept in Redis and take precedence.
    """

    name: str
    paths: Sequence[str] = ()
    rate: int = 0
    per: float = 60.0
    capacity: int = 0
    session: float = 600.0
    sliding: bool = False
    abandon: float = 300.0
    open_methods: Sequence[str] = ()
    methods: Sequence[str] | None = None  # deprecated: see open_methods
    fail: FailMode = "closed"
    title: str | Mapping[str, str] | Callable[[Mapping[str, str]], str | Mapping[str, str]] | None = None
    language: str | None = None
    max_step: int = 1000
    status: str = "open"
    method: str = "fifo"
    opens_at: datetime | float | str | None = None
    client_limit: int = 300
    challenge: int = 0
    target: Health | None = None
    accept: Callable[[Mapping[str, str]], bool] | None = None
    forget: float | None = None
    defaults: str = field(init=False, repr=False, compare=False)
    # The ``{names}`` in a template room's name (empty for a plain room):
    # found once, as the gate asks on every request.
    placeholders: tuple[str, ...] = field(init=False, repr=False, compare=False)
    cookie: bytes = field(init=False, repr=False, compare=False)  # the name of the room's cookie

    def __post_init__(self) -> None:
        where = f"Room {self.name!r}"
        # A placeholder stands for up to 40 characters of a derived room's name.
        if not isinstance(self.name, str) or not ROOM_NAME.fullmatch(PLACEHOLDER.sub("x" * 40, self.name)):
            raise ConfigError(
                "Room name must be 1-100 letters, digits, '-' or '_', with {placeholders} "
                f"counted as 40, got {self.name!r}"
            )
        object.__setattr__(self, "placeholders", tuple(PLACEHOLDER.findall(self.name)))
        object.__setattr__(self, "cookie", f"qg_{self.name}".encode())
        if isinstance(self.paths, str):
            raise ConfigError(f"{where}: paths must be a list of patterns like ['/checkout', '/checkout/*']")
        for pattern in self.paths:
            if not isinstance(pattern, str) or not pattern.startswith("/"):
                raise ConfigError(f"{where}: each path pattern must start with '/', got {pattern!r}")
            missing = sorted(set(self.placeholders) - set(PLACEHOLDER.findall(pattern)))
            if missing:
                names = ", ".join("{" + m + "}" for m in missing)
                raise ConfigError(f"{where}: path {pattern!r} must contain {names}")
        if isinstance(self.open_methods, str) or not all(
            isinstance(m, str) and METHOD.fullmatch(m) for m in self.open_methods
        ):
            raise ConfigError(f"{where}: open_methods must be a list of methods such as ['OPTIONS']")
        if self.methods is not None:
            if isinstance(self.methods, str) or not all(
                isinstance(m, str) and METHOD.fullmatch(m) for m in self.methods
            ):
                raise ConfigError(f"{where}: methods must be a list such as ['GET', 'POST'] or None")
            if self.open_methods:
                raise ConfigError(f"{where}: give open_methods or the deprecated methods, not both")
            warnings.warn(
                f"{where}: methods= is deprecated and will be removed in the next release: a room "
                "gates every method, and open_methods=[...] names those that pass ungated "
                "(e.g. ['OPTIONS']). methods= still gates only the methods it lists.",
                DeprecationWarning,
                stacklevel=3,
            )
            object.__setattr__(self, "methods", tuple(m.upper() for m in self.methods))
        # Tuples keep a Room hashable (derived rooms are cached by it).
        object.__setattr__(self, "paths", tuple(self.paths))
        object.__setattr__(self, "open_methods", tuple(m.upper() for m in self.open_methods))
        # A tuple of pairs: the stored form, as a template's derived rooms get it.
        if callable(self.title):
            if not self.placeholders:
                raise ConfigError(
                    f"{where}: a function as title is for a template room (a name with {{placeholders}})"
                )
        elif isinstance(self.title, (Mapping, tuple)):
            titles = dict(self.title)
            for code, text in titles.items():
                check_language(f"{where}: title language", code)
                if not isinstance(text, str):
                    raise ConfigError(f"{where}: title must be a string per language, got {text!r}")
            object.__setattr__(self, "title", tuple(sorted(titles.items())))  # hashable
        elif self.title is not None and not isinstance(self.title, str):
            raise ConfigError(
                f"{where}: title must be a string or a mapping of languages, got {self.title!r}"
            )
        check_language(f"{where}: language", self.language)
        if self.fail not in ("closed", "open"):
            raise ConfigError(f"{where}: fail must be 'closed' or 'open', got {self.fail!r}")
        if self.accept is not None and (not callable(self.accept) or not self.placeholders):
            raise ConfigError(f"{where}: accept must be a function of a template room's values")
        if self.target is not None and not isinstance(self.target, Health):
            raise ConfigError(f"{where}: target must be a Health(p95_ms=...), got {self.target!r}")
        controller = (self.target or Health(p95_ms=1)).settings()
        if self.target is None:
            controller["target_ms"] = 0
        try:
            checked = {
                name: check_room_setting(
                    name, controller[name] if name in controller else getattr(self, name)
                )
                for name in ROOM_SETTINGS
                if name != "forget"
            }
            # forget's default is from the others, so it comes once they are checked.
            if self.forget is None:
                longest = max(self.session, self.abandon, self.per) + FORGET_MARGIN
                object.__setattr__(self, "forget", longest if self.placeholders else 0)
            checked["forget"] = check_room_setting("forget", self.forget)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        args = tuple(checked[name] for name in ROOM_SETTINGS)
        if self.rate == 0 and self.capacity == 0:
            raise ConfigError(f"{where}: set rate (with per) or capacity, or both")
        object.__setattr__(self, "defaults", ",".join(args))

    def title_in(self, language: str) -> str:
        """The title shown to visitors in ``language``: the one given for it,
        else for English, else any given, else none ("": never the room's
        name, which is the operator's; a template's own title is a function
        of its rooms' values)."""
        if self.title is None or callable(self.title):
            return ""
        if isinstance(self.title, str):
            return self.title
        titles = dict(self.title)
        return titles.get(language) or titles.get("en") or next(iter(titles.values()), "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Room:
        """Build a room from plain data (the QUEUEGATE_ROOMS JSON)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"each room must be a JSON object, got {data!r}")
        known = {
            "name",
            "paths",
            "open_methods",
            "methods",
            "fail",
            "title",
            "language",
            "target",
            *(name for name in ROOM_SETTINGS if name not in CONTROLLER_SETTINGS),
        }
        unknown = set(data) - known - set(CONTROLLER_SETTINGS)
        if unknown:
            # A near miss of one of the target's names is said to go in "target"
            # (suggested as a room's own, it would be refused as one below).
            said = unknown_names(unknown, known, {"target": [each.name for each in fields(Health)]})
            raise ConfigError(f"unknown room setting(s) {said} in {data!r}")
        controller = sorted(set(data) & set(CONTROLLER_SETTINGS))
        if controller:
            # The controller's run-time names: in code, its settings are the target's.
            raise ConfigError(
                f"unknown room setting(s) {', '.join(controller)} in {data!r}: a health target is "
                'given as "target" (e.g. "target": {"p95_ms": 300, "floor": 1})'
            )
        if isinstance(data.get("target"), Mapping):
            try:
                data = {**data, "target": Health(**data["target"])}
            except TypeError as exc:
                raise ConfigError(f"target: {exc}") from None
        if "name" not in data or "paths" not in data:
            raise ConfigError(f"each room needs a name and paths, got {data!r}")
        return cls(**data)
