"""The console's connection to Redis: one store for a command (or a
watch's every round), each call bounded by ``--timeout``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable

from rich.console import RenderableType

from ..calls import FAILURES
from ..console import duration
from ..store import Store, StoreError, connect, operator_name
from .parser import URL, T

Output = str | RenderableType  # a str is printed as it is (JSON, one line)


class Bounded:
    """Each call to Redis given up after ``--timeout`` seconds, whatever the
    connection does (connect, handshake, a reply that never comes)."""

    def __init__(self, store: Store, seconds: float) -> None:
        self.store = store
        self.seconds = seconds

    async def __call__(self, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.seconds):
                return await call
        except TimeoutError:
            raise StoreError(f"no answer within {duration(self.seconds)}") from None


@contextlib.asynccontextmanager
async def opened(args: argparse.Namespace, url: str) -> AsyncIterator[Bounded]:
    """The rooms' store at ``url``, its calls bounded, closed after."""
    args.url = url
    client = connect(url, args.timeout, setting=URL)
    # Every change is logged in its room's activity log under this name.
    store = Store(client, args.prefix, args.timeout, actor=operator_name("console"))
    try:
        yield Bounded(store, args.timeout)
    finally:
        # Closing waits for nothing from the server, but is bounded too.
        with contextlib.suppress(TimeoutError, *FAILURES):
            async with asyncio.timeout(args.timeout):
                await store.aclose()
