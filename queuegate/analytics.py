"""How long people waited, how many gave up, and the line minute by minute.

``scripts/analytics.lua`` keeps the figures in Redis, bounded in memory
whatever the size of the line (histograms, arrival checkpoints dropped once
the line has passed them, two days of one-minute points); this module only
reads them into numbers for the console, the back office and Prometheus:

    figures = await store.analytics("sale")
    figures["waits"]["gave_up"]["p50_ms"]     # how long those who left had waited
    figures["estimate"]["share"]              # estimates within 20 % of the real wait
    figures["minutes"][-1]                    # the current minute

A visitor's joining time is known to within a second (the checkpoint before
their arrival number), so waits under a few seconds are approximate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .scripts import constant, numbers

__all__ = ["ACCURATE", "KEEP_MINUTES", "WAIT_BOUNDS_MS", "WaitHistogram", "summarise"]

# The rules' constants, read from the script so they are written once.
WAIT_BOUNDS_MS = numbers("analytics.lua", "WAIT_BOUNDS")
KEEP_MINUTES = int(constant("analytics.lua", "KEEP_MINUTES"))
ACCURATE = float(constant("analytics.lua", "ACCURATE"))
MINUTE_FIELDS = (
    *("at", "joined", "admitted", "gave_up", "wait_sum_ms", "waits"),
    *("waiting", "active", "eta_max_ms"),
)


@dataclass(frozen=True)
class WaitHistogram:
    """Waits (ms) in the buckets of ``WAIT_BOUNDS_MS``; the last bucket holds
    the waits longer than the last bound. ``max_ms``: the longest wait
    (``None`` where Redis has not recorded it)."""

    counts: tuple[int, ...]
    sum_ms: int
    max_ms: int | None = None

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float | None:
        """The wait (ms) under which a share ``q`` of the waits fall, read
        linearly inside its bucket; beyond the last bound, that bound (a
        lower bound of the truth); never more than the longest wait. None
        without any wait."""
        found = self._quantile(q)
        if found is None or self.max_ms is None:
            return found
        # Read inside a bucket, a quantile could pass the longest wait (three
        # waits of 6 s: p99 14.9 s in the 5-15 s bucket).
        return min(found, float(self.max_ms))

    def _quantile(self, q: float) -> float | None:
        total = self.count
        if total == 0:
            return None
        rank = q * total
        below = 0
        for i, n in enumerate(self.counts):
            if n and below + n >= rank:
                if i == len(WAIT_BOUNDS_MS):
                    return float(WAIT_BOUNDS_MS[-1])
                low = 0 if i == 0 else WAIT_BOUNDS_MS[i - 1]
                return low + (WAIT_BOUNDS_MS[i] - low) * (rank - below) / n
            below += n
        return float(WAIT_BOUNDS_MS[-1])  # pragma: no cover - rank <= total

    def as_dict(self) -> dict[str, Any]:
        count = self.count
        return {
            "bounds_ms": list(WAIT_BOUNDS_MS),
            "counts": list(self.counts),
            "count": count,
            "sum_ms": self.sum_ms,
            "mean_ms": self.sum_ms / count if count else None,
            "max_ms": self.max_ms if count else None,
            **{f"p{round(q * 100)}_ms": self.quantile(q) for q in (0.5, 0.9, 0.99)},
        }


def _histogram(fields: dict[str, int], kind: str) -> WaitHistogram:
    counts = tuple(fields.get(f"{kind}{i}", 0) for i in range(1, len(WAIT_BOUNDS_MS) + 2))
    return WaitHistogram(counts, fields.get(f"{kind}_sum", 0), fields.get(f"{kind}_max"))


def _minute(values: list[float], current: bool) -> dict[str, Any]:
    row: dict[str, Any] = {name: int(v) for name, v in zip(MINUTE_FIELDS, values, strict=False)}
    row["wait_avg_ms"] = row["wait_sum_ms"] / row["waits"] if row["waits"] else None
    row["current"] = current
    return row


def summarise(waits: dict[str, int], minutes: list[str], current: str | None) -> dict[str, Any]:
    """The figures from the raw keys: ``<base>waits`` (field -> count), the
    ``<base>minutes`` entries, and the current minute's counters from the
    state hash ("start,joined,admitted,gave_up,wait_sum,waits,eta_max";
    without its line figures, which the caller's stats give)."""
    rows = [_minute([float(v) for v in entry.split(",")], False) for entry in minutes]
    if current:
        values = [float(v) for v in current.split(",")]
        # The current minute's entry has no line figures yet: waiting and
        # active come at its end.
        rows.append(_minute([*values[:6], -1, -1, values[6]], True))
    checked, within = waits.get("est_n", 0), waits.get("est_ok", 0)
    return {
        "waits": {
            "admitted": _histogram(waits, "a").as_dict(),
            "gave_up": _histogram(waits, "g").as_dict(),
        },
        "estimate": {
            "within": ACCURATE,
            "checked": checked,
            "accurate": within,
            "share": within / checked if checked else None,
        },
        "minutes": rows,
    }
