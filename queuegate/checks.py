"""The run-time settings of a room, checked: one place that says which values
``rate``, ``per``, ``capacity`` and the rest may take, as ``Room(...)`` gives
them and as operators change them while the room runs."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from .i18n import LANGUAGES

__all__ = [
    "METHODS",
    "ROOM_SETTINGS",
    "STATUSES",
    "ConfigError",
    "check_language",
    "check_room_setting",
    "unknown_names",
]

STATUSES = ("open", "paused", "queue_all", "passthrough", "closed")
METHODS = ("fifo", "random")


class ConfigError(ValueError):
    """A setting is missing or wrong. The message names the setting."""


def unknown_names(
    names: Iterable[str],
    known: Iterable[str],
    elsewhere: Mapping[str, Iterable[str]] | None = None,
    *,
    prefix: str = "",
) -> str:
    """``names`` as an error message lists them, each with the known name
    it is likely a typo of: ``path (did you mean 'paths'?), speed``.
    ``elsewhere``: names that belong inside another setting, by that
    setting's name; a near miss of one is said with where it goes:
    ``flor (did you mean target's 'floor'?)``. ``prefix``: one that all
    the names share (``QUEUEGATE_``), left out of the likeness, where it
    would make any name look like every other."""
    places = {name: "" for name in known}
    for where, inside in (elsewhere or {}).items():
        for name in inside:
            places.setdefault(name, f"{where}'s ")
    choices = {name.removeprefix(prefix): name for name in sorted(places)}
    said = []
    for name in sorted(names):
        close = difflib.get_close_matches(name.removeprefix(prefix), list(choices), n=1)
        if close:
            found = choices[close[0]]
            said.append(f"{name} (did you mean {places[found]}{found!r}?)")
        else:
            said.append(name)
    return ", ".join(said)


# The shortest `abandon` (ms) but 0 (never skip): a waiting page asks every
# third of it, but every second at the quickest (pages.py), so a shorter
# one skips as gone visitors who are still there.
MIN_ABANDON_MS = 3000

# The hardest proof of work a room may ask: about a minute of a phone's time
# (see the README's figures); more would lock out the visitors it protects.
MAX_CHALLENGE = 10_000_000


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


def check_room_setting(name: str, value: Any, *, called: str | None = None) -> str:
    """Validate one run-time room setting; return it as the script stores it.

    The single place where the values of rate, per, capacity, session, sliding,
    abandon, max_step and status are checked, for ``Room(...)`` and for
    changes made while the room runs. Durations are seconds in Python and
    whole milliseconds in Redis. ``called``: the name the user gave the value
    by, when it is not the setting's (``Health(max_error_rate=...)`` is the
    setting ``max_errors``), for the message.
    """
    said = called or name
    if name in ("rate", "capacity", "client_limit"):
        return str(_whole(said, value))
    if name in ("target_ms", "ceiling"):
        return str(_whole(said, value))
    if name == "floor":  # 0: a visitor a second in the room's units (advance.lua)
        return str(_whole(said, value))
    if name == "max_errors":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
        if not ok:
            raise ConfigError(f"{said} must be a share between 0 and 1 (0.02 = 2 %), got {value!r}")
        return repr(float(value))
    if name == "challenge":
        if _whole(said, value) > MAX_CHALLENGE:
            raise ConfigError(f"{said} must be at most {MAX_CHALLENGE:,} (0 = none), got {value!r}")
        return str(value)
    if name == "max_step":
        return str(_whole(said, value, 1))
    if name in ("per", "session", "settle"):
        return str(max(1, round(_seconds(said, value) * 1000)))
    if name == "abandon":
        ms = round(_seconds(said, value, allow_zero=True) * 1000)
        if value and ms < MIN_ABANDON_MS:
            raise ConfigError(
                f"{said} must be 0 (never skip) or at least {MIN_ABANDON_MS // 1000} s: a waiting page asks "
                f"every second at the quickest, so a shorter one skips visitors still there, got {value!r}"
            )
        return str(ms)
    if name == "forget":
        return str(round(_seconds(said, value, allow_zero=True) * 1000))
    if name == "sliding":
        if not isinstance(value, bool):
            raise ConfigError(f"{said} must be True or False, got {value!r}")
        return "1" if value else "0"
    if name == "status":
        if value not in STATUSES:
            raise ConfigError(f"{said} must be one of {', '.join(STATUSES)}, got {value!r}")
        return str(value)
    if name == "method":
        if value not in METHODS:
            raise ConfigError(f"{said} must be one of {', '.join(METHODS)}, got {value!r}")
        return str(value)
    if name == "opens_at":
        return str(_opening_ms(value, said))
    raise ConfigError(f"unknown room setting {name!r}")


def check_language(name: str, value: Any) -> str | None:
    """A shipped language's catalog name (``ko``, ``zh_Hant``), or None."""
    if value is None:
        return None
    if value not in LANGUAGES:
        raise ConfigError(
            f"{name} must be one of {', '.join(LANGUAGES)} (or None: the visitor's), got {value!r}"
        )
    return str(value)


def _opening_ms(value: Any, name: str = "opens_at") -> int:
    """An opening time as epoch ms: a timezone-aware datetime, an ISO 8601 text
    with a zone, epoch seconds, or None/0 for no scheduled opening."""
    if value is None or value == 0:
        return 0
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{name} must be an ISO 8601 time, got {value!r}") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(f"{name} needs a time zone, like 2026-12-01T10:00:00+00:00, got {value}")
        return round(value.timestamp() * 1000)
    return round(_seconds(name, value) * 1000)


# In the order advance.lua reads them from a room's packed defaults.
ROOM_SETTINGS = (
    "rate",
    "per",
    "capacity",
    "session",
    "sliding",
    "abandon",
    "max_step",
    "status",
    "method",
    "opens_at",
    "client_limit",
    "forget",
    "challenge",
    # The admission controller's (see Health): from Room.target.
    "target_ms",
    "max_errors",
    "floor",
    "ceiling",
    "settle",
)
