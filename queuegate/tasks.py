"""Background tasks stopped for good."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

__all__ = ["stop"]

RETRY_S = 0.1  # a cancel not yet taken is made again this often


async def stop(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one is done.

    Cancelled until done: on Python 3.11 a cancel that lands as one of
    redis-py's own ``asyncio.wait_for`` calls completes is swallowed, and a
    plain ``await task`` then waits for as long as the task's loop runs (a
    store's ``aclose`` hung so). What they end with is read, so none is
    reported as never retrieved."""
    every = list(tasks)
    pending = {task for task in every if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RETRY_S)
    for task in every:
        if not task.cancelled():
            with contextlib.suppress(BaseException):
                task.exception()
