"""The speed benchmark's app (``benchmarks.app``), served under callgrind by
``python -m benchmarks.instructions --server``: a SIGUSR2 marks where a
counted batch starts (callgrind zeroes its counters at ``getppid``) and a
SIGUSR1 where it ends (it dumps them at ``getpgrp``). The app itself is
unchanged: the signals' handlers are the only addition to the process."""

from __future__ import annotations

import os
import signal
from types import FrameType

from .app import app


def _start(signum: int, frame: FrameType | None) -> None:
    os.getppid()


def _end(signum: int, frame: FrameType | None) -> None:
    os.getpgrp()


signal.signal(signal.SIGUSR2, _start)
signal.signal(signal.SIGUSR1, _end)

__all__ = ["app"]
