"""How late the event loop itself ran while a test timed its calls.

A loaded machine (a CI run on two busy cores) can stall the whole test
process: a call made at that moment takes the stall longer whatever the
code under test does (0.437 s for a call with a 0.25 s deadline, seen in a
loaded run). A probe that sleeps 5 ms at a time measures the stalls, and a
bound on a call's time is checked on its time less the longest stall seen
while the calls ran. A call that waits for something it should not (a
silence limit instead of its own deadline) waits with the loop idle: no
stall excuses it, so the bound still fails on that defect.

Check the times once the watch has ended: a stall is recorded when the
probe wakes after it, which may be after the call it delayed returned.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TypeVar

__all__ = ["LoopStalls"]

TICK = 0.005  # s: the probe's sleep

What = TypeVar("What")


class LoopStalls:
    """``async with LoopStalls() as stalls:``, then ``stalls.longest``: the
    longest the event loop was late to wake the probe (seconds)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _probe(self) -> None:
        while not self._done.is_set():
            before = time.monotonic()
            await asyncio.sleep(TICK)
            self.longest = max(self.longest, time.monotonic() - before - TICK)

    async def __aenter__(self) -> LoopStalls:
        self._task = asyncio.create_task(self._probe())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._done.set()
        if self._task is not None:
            await self._task

    def late(self, taken: Iterable[tuple[What, float]], bound: float) -> list[tuple[What, float]]:
        """The ``(what, seconds)`` whose seconds, less the longest stall,
        are over ``bound``; rounded for a readable failure."""
        return [(what, round(seconds, 3)) for what, seconds in taken if seconds - self.longest > bound]
