"""The demo shop, in process and as a new user starts it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import httpx
import pytest
import redis

from demo_app import create_app
from queuegate.embedded import free_port

from .conftest import client_for, running, wait_for_http

pytestmark = pytest.mark.anyio


async def test_concurrent_checkouts_never_oversell(redis_url: str) -> None:
    app = create_app(redis_url, stock=5, rate=100)
    async with running(app):
        clients = [client_for(app) for _ in range(2)]
        # Two visitors hammer the buy button 40 times in all; the room lets
        # every request through, so only the stock stands in the way.
        try:
            for client in clients:
                assert (await client.get("/checkout")).status_code == 200
            results = await asyncio.gather(
                *(clients[i % 2].post("/checkout/buy") for i in range(40)), return_exceptions=True
            )
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
    bodies = [r.text for r in results if isinstance(r, httpx.Response)]
    assert len(bodies) == 40
    assert sum("Order placed" in b for b in bodies) == 5
    assert sum("Sold out" in b for b in bodies) == 35
    with redis.Redis.from_url(redis_url) as db:
        assert db.get("demo:stock") == b"0"


def test_python_m_demo_app_serves_the_gate_and_stops_on_ctrl_c() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "QUEUEGATE_REDIS_URL"}
    process = subprocess.Popen(
        [sys.executable, "-m", "demo_app", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # A test runner in the background may have SIGINT ignored; a user's
        # terminal does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(4)]
        assert f"http://127.0.0.1:{port}/" in banner[0]
        assert "embedded" in banner[2]
        server_port = int(banner[2].split("redis://127.0.0.1:")[1].split("/")[0])
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/")
        assert httpx.get(f"{base}/checkout").status_code == 200
        assert httpx.get(f"{base}/checkout").status_code == 200
        third = httpx.get(f"{base}/checkout", headers={"accept": "text/html"})
        assert third.status_code == 503
        assert "You are in line" in third.text
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        with (
            redis.Redis(port=server_port, socket_connect_timeout=0.5) as gone,
            pytest.raises(redis.exceptions.ConnectionError),
        ):
            gone.ping()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        if process.stdout is not None:
            process.stdout.close()
