"""How long the machine stalled the test process while a test timed its calls.

A loaded machine (a CI run on two busy cores) can stall the whole test
process: a call made at that moment takes the stall longer whatever the code
under test does (0.437 s for a call with a 0.25 s deadline, seen in a loaded
run). A thread that sleeps 5 ms at a time sees those stalls as its own
lateness, and a call's time is checked less the stalls that overlapped it.

The probe is a thread, not a task on the event loop: code under test that
blocks the loop (a ``time.sleep``, a blocking socket) does not stall the
thread (the GIL is let go while it blocks, and taken back every switch
interval from code that computes), so it is not excused; a task would have
seen the loop's block as a stall and excused the defect it is there to
catch. A call that waits for something it should not (a silence limit
instead of its own deadline) waits with nothing stalled, so it is not
excused either.

Check the times once the watch has ended: a stall is recorded when the
probe wakes after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TypeVar

__all__ = ["Stalls"]

TICK = 0.005  # s: the probe's sleep
LATE = 0.002  # s: a wake-up later than this is a stall (timer slack is not)

What = TypeVar("What")


class Stalls:
    """``with Stalls() as stalls:`` around the calls, each timed as
    ``(what, began, ended)`` on ``time.monotonic()``; then
    ``stalls.late(calls, bound)``."""

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []  # (from, to) the process was stalled
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        while not self._done.is_set():
            before = time.monotonic()
            time.sleep(TICK)
            after = time.monotonic()
            if after - before - TICK > LATE:
                self.intervals.append((before + TICK, after))

    def __enter__(self) -> Stalls:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()

    def within(self, began: float, ended: float) -> float:
        """Seconds of stalls that overlapped ``[began, ended]``."""
        return sum(max(0.0, min(ended, to) - max(began, since)) for since, to in self.intervals)

    def late(self, calls: Iterable[tuple[What, float, float]], bound: float) -> list[tuple[What, float]]:
        """The ``(what, seconds)`` of the calls that took longer than
        ``bound`` beyond the stalls that overlapped them; rounded for a
        readable failure."""
        return [
            (what, round(ended - began, 3))
            for what, began, ended in calls
            if ended - began - self.within(began, ended) > bound
        ]
