"""Settings: rooms and gate-wide options, checked once at start-up.

Every value is validated when the object is built, so a wrong setting fails
when the app starts, with a message naming the setting, never at the first
request. Values may come from code or from ``QUEUEGATE_*`` environment
variables; code wins.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .checks import (
    ROOM_SETTINGS,
    STATUSES,
    ConfigError,
    _seconds,
    _whole,
    check_language,
    check_room_setting,
)
from .target import CONTROLLER_SETTINGS, Health

# ConfigError, ROOM_SETTINGS, STATUSES, check_room_setting (queuegate.checks)
# and Health (queuegate.target) are named here too, where callers import them.
__all__ = [
    "BINDINGS",
    "ROOM_SETTINGS",
    "STATUSES",
    "ConfigError",
    "Health",
    "Room",
    "Settings",
    "check_room_setting",
]

BINDINGS = ("network", "user_agent")  # what a cookie may be bound to
WAITING_STATUS_CODES = (200, 429, 503)
ROOM_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP method is a token (RFC 9110)
MIN_SECRET_LENGTH = 16

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
    has not polled for ``abandon`` seconds is skipped when their turn comes.
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
            raise ConfigError(f"{where}: paths must be a list of patterns like ['/checkout*']")
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
        if self.forget is None:
            longest = max(self.session, self.abandon, self.per) + FORGET_MARGIN
            object.__setattr__(self, "forget", longest if self.placeholders else 0)
        if self.target is not None and not isinstance(self.target, Health):
            raise ConfigError(f"{where}: target must be a Health(p95_ms=...), got {self.target!r}")
        controller = (self.target or Health(p95_ms=1)).settings()
        if self.target is None:
            controller["target_ms"] = 0
        try:
            args = tuple(
                check_room_setting(name, controller[name] if name in controller else getattr(self, name))
                for name in ROOM_SETTINGS
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
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
            *ROOM_SETTINGS,
        }
        unknown = sorted((set(data) - known) | (set(data) & set(CONTROLLER_SETTINGS)))
        if unknown:
            raise ConfigError(f"unknown room setting(s) {', '.join(unknown)} in {data!r}")
        if isinstance(data.get("target"), Mapping):
            try:
                data = {**data, "target": Health(**data["target"])}
            except TypeError as exc:
                raise ConfigError(f"target: {exc}") from None
        if "name" not in data or "paths" not in data:
            raise ConfigError(f"each room needs a name and paths, got {data!r}")
        return cls(**data)


def _env_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _env_secure(name: str, raw: str) -> bool | None:
    if raw.strip().lower() == "auto":
        return None
    try:
        return _env_bool(name, raw)
    except ConfigError:
        raise ConfigError(f"{name} must be true, false or auto, got {raw!r}") from None


def _env_list(name: str, raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _env_number(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class Settings:
    """Gate-wide settings. Build with ``Settings.load(...)`` to read the environment.

    ``secret_keys`` is newest first: the first key signs new cookies and all
    verify, so a key can be rotated without sending everybody to the back.

    ``cookie_secure`` (``QUEUEGATE_COOKIE_SECURE``: true, false or auto)
    left as ``None`` follows the request: the rooms' cookies are ``Secure``
    when the client came over https (the server's ``scope["scheme"]``, or a
    trusted proxy's ``X-Forwarded-Proto``) and not over plain http, where
    no client would send a ``Secure`` cookie back and every request would be
    a newcomer; the first gated page served over plain http is logged once.
    ``True`` or ``False`` sets it for every request (``True`` behind a TLS
    proxy whose ``X-Forwarded-Proto`` nobody trusts).
    """

    secret_keys: tuple[str, ...]
    redis_url: str | None = None
    rooms: tuple[Room, ...] = ()
    prefix: str = "qg"
    cookie_secure: bool | None = None
    cookie_max_age: int = 86400
    timeout: float = 0.25
    local_admissions: bool = True
    far_back: bool = True
    max_connections: int = 50
    waiting_status: int = 503
    endpoint: str = "/_queuegate"
    bypass_paths: tuple[str, ...] = ()
    bypass_secret: str | None = None
    bypass_networks: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    bind_cookie: tuple[str, ...] = ()
    language: str | None = None

    def __post_init__(self) -> None:
        if not self.secret_keys:
            raise ConfigError("secret_key is not set: pass secret_key=... or set QUEUEGATE_SECRET_KEY")
        for key in self.secret_keys:
            if not isinstance(key, str) or len(key) < MIN_SECRET_LENGTH:
                raise ConfigError(
                    f"secret_key: each key must be a string of at least {MIN_SECRET_LENGTH} "
                    "characters (generate one with: python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))')"
                )
        names = [room.name for room in self.rooms]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"rooms: room names must be unique, repeated: {', '.join(duplicates)}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", self.prefix):
            raise ConfigError(f"prefix must be 1-32 letters, digits, '.', '-' or '_', got {self.prefix!r}")
        if self.cookie_secure is not None and not isinstance(self.cookie_secure, bool):
            raise ConfigError(f"cookie_secure must be True, False or None, got {self.cookie_secure!r}")
        _whole("cookie_max_age", self.cookie_max_age, 1)
        _seconds("timeout", self.timeout)
        if not isinstance(self.local_admissions, bool):
            raise ConfigError(f"local_admissions must be True or False, got {self.local_admissions!r}")
        if not isinstance(self.far_back, bool):
            raise ConfigError(f"far_back must be True or False, got {self.far_back!r}")
        _whole("max_connections", self.max_connections, 1)
        if self.waiting_status not in WAITING_STATUS_CODES:
            raise ConfigError(
                f"waiting_status must be one of {WAITING_STATUS_CODES}, got {self.waiting_status!r}"
            )
        if not re.fullmatch(r"(/[A-Za-z0-9_.-]+)+", self.endpoint):
            raise ConfigError(f"endpoint must be a path like '/_queuegate', got {self.endpoint!r}")
        for pattern in self.bypass_paths:
            if not isinstance(pattern, str) or not pattern.startswith("/"):
                raise ConfigError(f"bypass_paths: each pattern must start with '/', got {pattern!r}")
        if self.bypass_secret is not None and len(self.bypass_secret) < MIN_SECRET_LENGTH:
            raise ConfigError(f"bypass_secret must be at least {MIN_SECRET_LENGTH} characters")
        check_language("language", self.language)
        for binding in self.bind_cookie:
            if binding not in BINDINGS:
                raise ConfigError(
                    f"bind_cookie: each item must be one of {', '.join(BINDINGS)}, got {binding!r}"
                )
        for name in ("bypass_networks", "trusted_proxies"):
            for network in getattr(self, name):
                try:
                    ipaddress.ip_network(network, strict=False)
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"{name}: {network!r} is not a network like 10.0.0.0/8 or ::1"
                    ) from None

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        secret_key: str | Sequence[str] | None = None,
        rooms: Sequence[Room] | None = None,
        **options: Any,
    ) -> Settings:
        """Settings from keyword arguments, falling back to ``QUEUEGATE_*`` variables."""
        env = os.environ if environ is None else environ
        keys: tuple[str, ...]
        if secret_key is None:
            raw = env.get("QUEUEGATE_SECRET_KEY", "")
            keys = tuple(k.strip() for k in raw.split(",") if k.strip())
        elif isinstance(secret_key, str):
            keys = (secret_key,)
        else:
            keys = tuple(secret_key)
        if rooms is None:
            rooms = _rooms_from_env(env.get("QUEUEGATE_ROOMS", ""))
        casts: dict[str, Any] = {
            "redis_url": ("QUEUEGATE_REDIS_URL", str),
            "prefix": ("QUEUEGATE_PREFIX", str),
            "cookie_secure": ("QUEUEGATE_COOKIE_SECURE", _env_secure),
            "cookie_max_age": ("QUEUEGATE_COOKIE_MAX_AGE", lambda n, v: int(_env_number(n, v))),
            "timeout": ("QUEUEGATE_TIMEOUT", _env_number),
            "local_admissions": ("QUEUEGATE_LOCAL_ADMISSIONS", _env_bool),
            "far_back": ("QUEUEGATE_FAR_BACK", _env_bool),
            "max_connections": ("QUEUEGATE_MAX_CONNECTIONS", lambda n, v: int(_env_number(n, v))),
            "waiting_status": ("QUEUEGATE_WAITING_STATUS", lambda n, v: int(_env_number(n, v))),
            "endpoint": ("QUEUEGATE_ENDPOINT", str),
            "bypass_paths": ("QUEUEGATE_BYPASS_PATHS", _env_list),
            "bypass_secret": ("QUEUEGATE_BYPASS_SECRET", str),
            "bypass_networks": ("QUEUEGATE_BYPASS_NETWORKS", _env_list),
            "trusted_proxies": ("QUEUEGATE_TRUSTED_PROXIES", _env_list),
            "bind_cookie": ("QUEUEGATE_BIND_COOKIE", _env_list),
            "language": ("QUEUEGATE_LANGUAGE", str),
        }
        unknown = sorted(set(options) - set(casts))
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, (variable, cast) in casts.items():
            if options.get(name) is not None:
                value = options[name]
                if name in ("bypass_paths", "bypass_networks", "trusted_proxies", "bind_cookie"):
                    if isinstance(value, str):
                        raise ConfigError(f"{name} must be a list, got the string {value!r}")
                    value = tuple(value)
                values[name] = value
            elif variable in env:
                values[name] = env[variable] if cast is str else cast(variable, env[variable])
        return cls(secret_keys=keys, rooms=tuple(rooms), **values)


def _rooms_from_env(raw: str) -> tuple[Room, ...]:
    if not raw.strip():
        return ()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"QUEUEGATE_ROOMS is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError("QUEUEGATE_ROOMS must be a JSON list of room objects")
    try:
        return tuple(Room.from_dict(item) for item in data)
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"QUEUEGATE_ROOMS: {exc}") from None
