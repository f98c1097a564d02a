"""A room's health target (``Room(target=Health(...))``): what admission
that follows the app's health keeps the app's responses under. The law
itself is in ``queuegate/scripts/health.lua``; the measuring in
``queuegate/health.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from .checks import ConfigError, check_room_setting

__all__ = ["CONTROLLER_SETTINGS", "Health", "verdict"]


# Set through Room(target=Health(...)), not as Room fields of their own.
CONTROLLER_SETTINGS = ("target_ms", "max_errors", "floor", "ceiling", "settle")

Signal = Literal["room", "app"]

# The controller's reasons (health.lua), by their leading words, as a short
# verdict an operator can act on: (the reason starts with, verdict).
# The first that matches wins; the exact reason stays beside it.
VERDICTS = (
    ("hold: pinned", "pinned by an operator"),
    ("hold: the line is not moving", "holding: the line is not moving"),
    ("hold: too few responses", "holding: too few responses yet"),
    ("hold: down at minimal load", "holding: the app fails at minimal load"),
    ("hold:", "holding"),
    ("raise:", "raising"),
    ("lower: to the ceiling", "lowering: to the ceiling"),
    ("lower: error rate", "lowering: app errors over the limit"),
    ("lower:", "lowering"),
    ("cut: p95", "cut: app over target"),
    ("cut: error rate", "cut: app errors over the limit"),
    ("cut:", "cut"),
    ("target out of reach", "target out of reach"),
)


@dataclass(frozen=True)
class Health:
    """A room's health target: admission follows the app's health instead of
    a fixed number (see ``queuegate/scripts/health.lua`` for the law).

    The controller keeps the p95 of the time to the end of the responses the
    gate forwards under ``p95_ms`` and their share of errors (5xx, exceptions)
    under ``max_error_rate``, by setting the room's rate (or, in a room
    without a rate, its capacity) between ``floor`` and ``ceiling`` (None: no
    upper bound). ``floor`` None: a visitor a second (a rate per 60 s:
    60), no more than the room's own rate, nor its ceiling; 1 for a
    capacity. The room's own ``rate``/``capacity`` is where it starts.
    ``signal="room"`` measures the room's own paths; ``"app"`` every request
    the gate forwards (the pages a checkout slows down too). ``settle`` is
    the least time a change of the rate gets to show (seconds) before the
    controller probes for more, takes a graded step for errors or moves
    after a lowering; a cut for an overload does not wait. About how long
    a visit lasts: the visit the gate measures (by age since admission)
    lengthens it (but for the model's raise after a cut), never shortens
    it. What to set: docs/guides/health.md; the law: docs/guides/health-law.md.
    """

    p95_ms: float
    max_error_rate: float = 0.02
    floor: int | None = None
    ceiling: int | None = None
    signal: Signal = "room"
    settle: float = 10.0

    def __post_init__(self) -> None:
        ok = isinstance(self.p95_ms, (int, float)) and not isinstance(self.p95_ms, bool)
        if not ok or not math.isfinite(self.p95_ms) or self.p95_ms < 1:
            raise ConfigError(f"Health: p95_ms must be a number of milliseconds >= 1, got {self.p95_ms!r}")
        if self.signal not in ("room", "app"):
            raise ConfigError(f"Health: signal must be 'room' or 'app', got {self.signal!r}")
        try:
            check_room_setting("max_errors", self.max_error_rate, called="max_error_rate")
            if self.floor is not None:
                # 0 is refused in code: it is how None (the default) is
                # stored, and would read as that default, not as no floor.
                whole = isinstance(self.floor, int) and not isinstance(self.floor, bool)
                if not whole or self.floor < 1:
                    raise ConfigError(
                        f"floor must be a whole number >= 1 (None: a visitor a second), got {self.floor!r}"
                    )
            check_room_setting("ceiling", 0 if self.ceiling is None else self.ceiling)
            check_room_setting("settle", self.settle)
        except ConfigError as exc:
            raise ConfigError(f"Health: {exc}") from None
        if self.ceiling is not None and self.ceiling < (self.floor or 1):
            raise ConfigError(
                f"Health: ceiling {self.ceiling} is below the floor {self.floor or 1}"
                + ("" if self.floor else " (None: no ceiling)")
            )

    def settings(self) -> dict[str, Any]:
        """As the room's run-time settings. A ``floor`` of None is stored as
        0, which ``advance.lua`` makes a visitor a second in the units of
        the ``per`` in force, no more than the room's rate from code in
        those units, nor its ceiling (1 for a capacity): the law looks each
        second and learns only from what it lets in, and a floor of one
        visitor a minute left it blind for a minute after each cut. Made
        there, from the pair in force, so that an operator's run-time
        ``--per`` moves it too."""
        return {
            "target_ms": round(self.p95_ms),
            "max_errors": self.max_error_rate,
            "floor": self.floor or 0,
            "ceiling": self.ceiling or 0,
            "settle": self.settle,
        }


def verdict(reason: str) -> str:
    """The controller's last reason (``health_reason``, e.g. ``raise: within
    target, visitors waiting (capacity x1.25)``) as a short verdict
    (``raising``); "" before its first decision. A reason of a form not
    known here is shown by its leading words."""
    for start, said in VERDICTS:
        if reason.startswith(start):
            return said
    return reason.split(":", 1)[0]
