"""Settings: rooms and gate-wide options, checked once at start-up.

Every value is validated when the object is built, so a wrong setting fails
when the app starts, with a message naming the setting, never at the first
request. Values may come from code or from ``QUEUEGATE_*`` environment
variables; code wins.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["STATUSES", "ConfigError", "Room", "Settings", "check_room_setting"]

STATUSES = ("open", "paused", "queue_all", "passthrough", "closed")
WAITING_STATUS_CODES = (200, 429, 503)
ROOM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MIN_SECRET_LENGTH = 16

FailMode = Literal["closed", "open"]


class ConfigError(ValueError):
    """A setting is missing or wrong. The message names the setting."""


def _whole(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return value


def _seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a number of seconds {bound}, got {value!r}")
    return float(value)


def check_room_setting(name: str, value: Any) -> str:
    """Validate one run-time room setting; return it as the script stores it.

    The single place where the values of rate, per, capacity, session, sliding,
    abandon, max_step and status are checked, for ``Room(...)`` and for
    changes made while the room runs. Durations are seconds in Python and
    whole milliseconds in Redis.
    """
    if name in ("rate", "capacity"):
        return str(_whole(name, value))
    if name == "max_step":
        return str(_whole(name, value, 1))
    if name in ("per", "session"):
        return str(max(1, round(_seconds(name, value) * 1000)))
    if name == "abandon":
        return str(round(_seconds(name, value, allow_zero=True) * 1000))
    if name == "sliding":
        if not isinstance(value, bool):
            raise ConfigError(f"sliding must be True or False, got {value!r}")
        return "1" if value else "0"
    if name == "status":
        if value not in STATUSES:
            raise ConfigError(f"status must be one of {', '.join(STATUSES)}, got {value!r}")
        return str(value)
    raise ConfigError(f"unknown room setting {name!r}")


ROOM_SETTINGS = ("rate", "per", "capacity", "session", "sliding", "abandon", "max_step", "status")


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
    to visitors on the waiting page (default: ``name``).

    These are the room's defaults; values changed at run time (see
    ``Store.configure``) are kept in Redis and take precedence.
    """

    name: str
    paths: Sequence[str]
    rate: int = 0
    per: float = 60.0
    capacity: int = 0
    session: float = 600.0
    sliding: bool = False
    abandon: float = 300.0
    methods: Sequence[str] | None = None
    fail: FailMode = "closed"
    title: str | None = None
    max_step: int = 1000
    status: str = "open"
    script_args: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"Room {self.name!r}"
        if not isinstance(self.name, str) or not ROOM_NAME.fullmatch(self.name):
            raise ConfigError(f"Room name must be 1-64 letters, digits, '-' or '_', got {self.name!r}")
        if isinstance(self.paths, str) or not self.paths:
            raise ConfigError(f"{where}: paths must be a non-empty list of patterns like '/checkout*'")
        for pattern in self.paths:
            if not isinstance(pattern, str) or not pattern.startswith("/"):
                raise ConfigError(f"{where}: each path pattern must start with '/', got {pattern!r}")
        if self.methods is not None and (
            isinstance(self.methods, str) or not all(isinstance(m, str) for m in self.methods)
        ):
            raise ConfigError(f"{where}: methods must be a list such as ['GET', 'POST'] or None")
        if self.title is not None and not isinstance(self.title, str):
            raise ConfigError(f"{where}: title must be a string, got {self.title!r}")
        if self.fail not in ("closed", "open"):
            raise ConfigError(f"{where}: fail must be 'closed' or 'open', got {self.fail!r}")
        try:
            args = tuple(check_room_setting(name, getattr(self, name)) for name in ROOM_SETTINGS)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if self.rate == 0 and self.capacity == 0:
            raise ConfigError(f"{where}: set rate (with per) or capacity, or both")
        object.__setattr__(self, "script_args", args)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Room:
        """Build a room from plain data (the QUEUEGATE_ROOMS JSON)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"each room must be a JSON object, got {data!r}")
        known = {"name", "paths", "methods", "fail", "title", *ROOM_SETTINGS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown room setting(s) {', '.join(unknown)} in {data!r}")
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
    """

    secret_keys: tuple[str, ...]
    redis_url: str | None = None
    rooms: tuple[Room, ...] = ()
    prefix: str = "qg"
    cookie_secure: bool = True
    cookie_max_age: int = 86400
    timeout: float = 0.25
    max_connections: int = 50
    waiting_status: int = 503
    endpoint: str = "/_queuegate"

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
        _whole("cookie_max_age", self.cookie_max_age, 1)
        _seconds("timeout", self.timeout)
        _whole("max_connections", self.max_connections, 1)
        if self.waiting_status not in WAITING_STATUS_CODES:
            raise ConfigError(
                f"waiting_status must be one of {WAITING_STATUS_CODES}, got {self.waiting_status!r}"
            )
        if not re.fullmatch(r"(/[A-Za-z0-9_.-]+)+", self.endpoint):
            raise ConfigError(f"endpoint must be a path like '/_queuegate', got {self.endpoint!r}")

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
            "cookie_secure": ("QUEUEGATE_COOKIE_SECURE", _env_bool),
            "cookie_max_age": ("QUEUEGATE_COOKIE_MAX_AGE", lambda n, v: int(_env_number(n, v))),
            "timeout": ("QUEUEGATE_TIMEOUT", _env_number),
            "max_connections": ("QUEUEGATE_MAX_CONNECTIONS", lambda n, v: int(_env_number(n, v))),
            "waiting_status": ("QUEUEGATE_WAITING_STATUS", lambda n, v: int(_env_number(n, v))),
            "endpoint": ("QUEUEGATE_ENDPOINT", str),
        }
        unknown = sorted(set(options) - set(casts))
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, (variable, cast) in casts.items():
            if options.get(name) is not None:
                values[name] = options[name]
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
