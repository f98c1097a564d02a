"""How the console shows numbers to people: a unit on every number, times
and durations as people say them ("3 min 20 s", "12:04:05 UTC", "—" for
unknown), tables by ``rich``; colour only on a terminal, plain text when
piped. What ``--json`` prints is not made here.
"""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from typing import IO, Any

from rich.console import Console, RenderableType

__all__ = [
    "UNKNOWN",
    "clock",
    "count",
    "duration",
    "make_console",
    "milliseconds",
    "per_minute",
    "percent",
    "show",
]

UNKNOWN = "—"
PIPED_WIDTH = 200  # columns when piped: a table is never wrapped to a terminal it is not on
UNITS = ((86_400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def make_console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout): styles and the terminal's width on a
    terminal; plain text, never wrapped at 80 columns, when piped. rich also
    honours NO_COLOR and FORCE_COLOR."""
    out = file or sys.stdout
    terminal = out.isatty()
    return Console(file=out, highlight=False, width=None if terminal else PIPED_WIDTH)


def show(renderable: RenderableType, file: IO[str] | None = None) -> None:
    """Print ``renderable``; piped, as plain lines with no trailing blanks."""
    console = make_console(file)
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    console.file.write("\n".join(lines) + "\n")


def duration(seconds: float | None) -> str:
    """'250 ms', '2.5 s', '42 s', '3 min 20 s', '1 h 5 min', '2 d 3 h'; '0 s'
    for none (not '0 ms', a measurement); '—' for unknown (``None``,
    negative)."""
    return milliseconds(None if seconds is None or seconds < 0 else seconds * 1000)


def _nearest(x: float) -> int:
    # Halves up, as the back office's Math.round (Python's round() takes
    # them to even: 142.5 s was "2 min 22 s" here and "2 min 23 s" there).
    return math.floor(x + 0.5)


def milliseconds(ms: float | None) -> str:
    """A duration given in ms (-1 or ``None``: unknown), as ``duration``
    says it. Step for step the back office's ``seconds`` (admin.js), so
    that both say the same for the same reading."""
    if ms is None or ms < 0 or math.isnan(ms):
        return UNKNOWN
    if ms == 0:
        return "0 s"
    if _nearest(ms) < 1000:
        return f"{_nearest(ms)} ms"
    tenths = _nearest(ms / 100) / 10
    if tenths < 10 and tenths != _nearest(tenths):
        return f"{tenths:.1f} s"
    total = _nearest(ms / 1000)
    parts: list[tuple[int, str]] = []
    for size, unit in UNITS:
        amount, total = divmod(total, size)
        if amount or parts:
            parts.append((amount, unit))
    # The two largest units people care about; "1 h", not "1 h 0 min".
    return " ".join(f"{amount} {unit}" for amount, unit in parts[:2] if amount)


def clock(epoch_ms: int, now_ms: int | None = None) -> str:
    """'12:04:05 UTC' (with the date when not today's), and with ``now_ms``
    how far off it is: '12:04:05 UTC (in 3 min 20 s)', '(4 s ago)'."""
    if epoch_ms <= 0:
        return UNKNOWN
    at = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    today = now_ms is not None and datetime.fromtimestamp(now_ms / 1000, UTC).date() == at.date()
    text = at.strftime("%H:%M:%S UTC" if today else "%Y-%m-%d %H:%M:%S UTC")
    if now_ms is None:
        return text
    off = (epoch_ms - now_ms) / 1000
    if abs(off) < 1:
        return f"{text} (now)"
    return f"{text} (in {duration(off)})" if off > 0 else f"{text} ({duration(-off)} ago)"


def plain(value: Any) -> Any:
    """A whole number of seconds (or anything) as people write it: 10, not
    10.0; other values as they are."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def count(number: int, one: str, many: str | None = None) -> str:
    """'1 visitor', '1,204 visitors'."""
    return f"{number:,} {one if number == 1 else (many or one + 's')}"


def per_minute(rate: float) -> str:
    """'0.5 a minute', '12 a minute'."""
    shown = f"{rate:.1f}" if 0 < rate < 10 else f"{rate:,.0f}"
    return f"{shown.removesuffix('.0')} a minute"


def percent(share: float | None) -> str:
    """A share (0.02) as '2 %'; '—' when unknown."""
    if share is None:
        return UNKNOWN
    shown = f"{share * 100:.1f}".removesuffix(".0")
    return f"{shown} %"
