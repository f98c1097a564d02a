"""A room's figures and settings as stats.lua reports them, in Python
values; and which settings an operator set at run time, over the code's.

Which value is in force is the scripts' rule (advance.lua: a field set at
run time wins over the code's default); stats.lua says which fields are
set and what the code says of each, and this module only puts it in
people's units."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .outcomes import text

__all__ = ["DURATIONS", "decode_stats", "described", "figure", "in_people_units", "readable", "run_time"]

# Settings kept in ms in Redis, and given in seconds to people (and the
# bucket's step, beside per).
DURATIONS = ("per", "session", "abandon", "settle", "forget", "step")
TEXTS = (
    *("status", "method", "seed_sha256", "health_reason", "health_changed"),
    *("controlled", "pinned_setting", "held"),
)


# The controller reads its figures over a window or two of 1-10 s at each
# look, and looks only as responses are reported: figures older than this
# are said to be old (the console's `show`, the back office).
STALE_HEALTH_MS = 10_000


def health_age_ms(stats: dict[str, Any]) -> int:
    """How long ago the controller's figures were read (``health_at``),
    once that is STALE_HEALTH_MS or more; 0 while they are fresh, or before
    any."""
    at = int(stats.get("health_at", 0))
    age = int(stats["now"]) - at
    return age if at > 0 and age >= STALE_HEALTH_MS else 0


def figure(key: str, value: str) -> Any:
    """A field as a room's state or stats.lua keeps it (text) as a Python value."""
    if key in TEXTS:
        return value
    if key.endswith("per_minute") or key in ("max_errors", "error_rate"):
        return float(value)
    return int(float(value))


def decode_stats(reply: Sequence[Any]) -> dict[str, Any]:
    """stats.lua's flat reply as a dict (durations in ms): ``run_time``
    lists the settings an operator set at run time, which win over the
    code's; ``controlled`` names the one the admission controller holds
    ("": none); ``code`` has the code's value of each of those, as its app
    processes last told Redis (none: not known)."""
    out: dict[str, Any] = {"code": {}}
    for field, raw in zip(reply[::2], reply[1::2], strict=True):
        key, value = text(field), text(raw)
        if key == "run_time":
            out[key] = value.split(",") if value else []
        elif key.startswith("code_"):
            out["code"][key[5:]] = figure(key[5:], value)
        else:
            out[key] = figure(key, value)
    return out


def readable(name: str, value: Any) -> Any:
    """A setting's value for people: seconds for a duration, an ISO 8601
    time for a scheduled opening (0: none)."""
    if value is None:
        return None
    if name in DURATIONS:
        return value / 1000
    if name == "opens_at" and isinstance(value, int) and value > 0:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat()
    return value


def in_people_units(figures: dict[str, Any]) -> dict[str, Any]:
    """Each of ``figures`` (a room's stats, or the settings a forgotten
    room had set at run time) as ``readable`` gives it to people: durations
    in seconds, a scheduled opening in ISO 8601, the others as they are."""
    return {name: readable(name, value) for name, value in figures.items()}


def run_time(stats: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings an operator set at run time: for each, the value in
    force and the code's (``None``: not known), in people's units."""
    return {
        name: {"value": readable(name, stats[name]), "code": readable(name, stats["code"].get(name))}
        for name in stats["run_time"]
    }


def described(stats: dict[str, Any]) -> str:
    """``rate 5 (code: 3), per 1 s (the same as the code's)``: each setting
    set at run time with the code's value, for a log line (one the same as
    the code's still holds over a later deploy's)."""

    def said(name: str, value: Any) -> str:
        if value is None:
            return "not known"
        return f"{value:g} s" if name in DURATIONS else str(value)

    return ", ".join(
        f"{name} {said(name, values['value'])} "
        + (
            "(the same as the code's)"
            if values["value"] == values["code"]
            else f"(code: {said(name, values['code'])})"
        )
        for name, values in run_time(stats).items()
    )
