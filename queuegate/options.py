"""The gate's own options (its keys, Redis, cookies, endpoints, proxies),
checked once at start-up, from code or from ``QUEUEGATE_*`` environment
variables (code wins); a room's settings are ``queuegate.settings``'s.

Every value is validated when the object is built, so a wrong setting fails
when the app starts, with a message naming the setting, never at the first
request.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import ConfigError, _seconds, _whole, check_language, unknown_names
from .settings import Room

__all__ = ["BINDINGS", "KNOWN_VARIABLES", "Settings"]

logger = logging.getLogger("queuegate")

BINDINGS = ("network", "user_agent")  # what a cookie may be bound to
WAITING_STATUS_CODES = (200, 429, 503)
MIN_SECRET_LENGTH = 16


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


PREFIX = "QUEUEGATE_"  # of the variables the gate reads

# The options a variable may give, by option: (its variable, how its text
# is read). secret_key and rooms are read apart (QUEUEGATE_SECRET_KEY,
# QUEUEGATE_ROOMS).
FROM_ENVIRONMENT: dict[str, Any] = {
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


# QUEUEGATE_* variables that are no option of the gate's and no typo: the
# back office's secret and the demo shop's token. (This repository's own
# tests and benchmarks name theirs QGDEV_*, which no gate reads.)
OTHER_VARIABLES = ("QUEUEGATE_ADMIN_SECRET", "QUEUEGATE_DEMO_ADMIN_TOKEN")
KNOWN_VARIABLES = frozenset(
    {
        "QUEUEGATE_SECRET_KEY",
        "QUEUEGATE_ROOMS",
        *(variable for variable, _ in FROM_ENVIRONMENT.values()),
        *OTHER_VARIABLES,
    }
)


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
            raise ConfigError(
                "secret_key is not set: pass secret_key=... or set QUEUEGATE_SECRET_KEY (16 or more random "
                "characters, the same in every process; make one with: python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        for key in self.secret_keys:
            if not isinstance(key, str) or len(key) < MIN_SECRET_LENGTH:
                raise ConfigError(
                    f"secret_key: each key must be a string of at least {MIN_SECRET_LENGTH} "
                    "characters (generate one with: python3 -c 'import secrets; "
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
        for variable in sorted(
            name for name in env if name.startswith(PREFIX) and name not in KNOWN_VARIABLES
        ):
            # A warning, not an error: the name may be another version's setting.
            logger.warning(
                "queuegate: unknown environment variable %s, ignored (not a setting of this version "
                "of queuegate)",
                unknown_names([variable], KNOWN_VARIABLES, prefix=PREFIX),
            )
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
        unknown = sorted(set(options) - set(FROM_ENVIRONMENT))
        if unknown:
            raise ConfigError(f"unknown setting(s): {unknown_names(unknown, FROM_ENVIRONMENT)}")
        values: dict[str, Any] = {}
        for name, (variable, cast) in FROM_ENVIRONMENT.items():
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
