"""The demo shop, in process and as a new user starts it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest
import redis
import uvicorn

import demo_app.__main__
from demo_app import create_app
from queuegate import Store
from queuegate.embedded import EmbeddedServer, free_port
from queuegate.store import connect

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
        banner = [process.stdout.readline() for _ in range(5)]
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
        # The line the demo prints for the console, run as printed, finds its room.
        export = banner[3].split("console:", 1)[1].strip()
        assert export == f"export QUEUEGATE_REDIS_URL=redis://127.0.0.1:{server_port}/0"
        console_env = {**env, "QUEUEGATE_REDIS_URL": export.partition("=")[2]}
        listing = subprocess.run(
            [sys.executable, "-m", "queuegate", "list", "--json"],
            capture_output=True, text=True, env=console_env, timeout=30,
        )  # fmt: skip
        assert [(room["room"], room["waiting"]) for room in json.loads(listing.stdout)] == [("checkout", 1)]
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


def test_a_busy_port_is_refused_before_anything_is_printed_or_started() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
        result = subprocess.run(
            [sys.executable, "-m", "demo_app", "--port", str(port)],
            capture_output=True, text=True, env=env, timeout=30,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""  # no shop URL, no back office pointing at the other program
    assert f"cannot listen on 127.0.0.1:{port} (in use)" in result.stderr
    assert f"--port {port + 1}" in result.stderr
    assert "Errno" not in result.stderr


async def test_an_unknown_event_is_a_404_before_any_room_exists(redis_url: str) -> None:
    app = create_app(redis_url)
    async with running(app), client_for(app) as visitor:
        unknown = await visitor.get("/tickets/no-such-event/buy")
        assert unknown.status_code == 404
        known = await visitor.get("/tickets/jazz-night/buy")
        assert known.status_code == 200
        assert "Jazz night" in known.text
    with redis.Redis.from_url(redis_url) as client:
        assert client.keys("qg:{ticket-no-such-event}*") == []
        assert client.keys("qg:{ticket-jazz-night}:state") != []


async def test_after_the_countdown_the_sale_is_over_everywhere(redis_url: str) -> None:
    app = create_app(redis_url, sale_minutes=0)
    async with running(app), client_for(app) as visitor:
        home = await visitor.get("/")
        assert "The sale has ended" in home.text
        assert "Buy now" not in home.text
        assert "The sale has ended" in (await visitor.get("/checkout")).text
        bought = await visitor.post("/checkout/buy")
        assert "The sale has ended" in bought.text
        assert "Order placed" not in bought.text
    with redis.Redis.from_url(redis_url) as client:
        assert client.get("demo:stock") == b"100"  # nothing taken


async def test_room_titles_follow_the_visitor_s_language(redis_url: str) -> None:
    app = create_app(redis_url, rate=1, per=60.0)
    async with running(app), client_for(app) as first:
        await first.get("/checkout")  # the one place of the minute
        for language, title in (("ko", "한정판 스니커즈 결제"), ("ar", "الدفع: أحذية رياضية بإصدار محدود")):
            async with client_for(app) as visitor:
                page = await visitor.get("/checkout", headers={"accept-language": language})
                assert page.status_code == 503  # the waiting page
                assert f'lang="{language}"' in page.text
                assert title in page.text
                assert "Limited sneakers checkout" not in page.text


async def test_a_ticket_room_s_waiting_page_bears_the_event_s_name(redis_url: str) -> None:
    app = create_app(redis_url)
    async with running(app):
        inside = [client_for(app) for _ in range(3)]  # the room's capacity
        try:
            for client in inside:
                assert (await client.get("/tickets/opera-gala/buy")).status_code == 200
            async with client_for(app) as visitor:
                for language in ("en", "ko", "ar"):
                    page = await visitor.get("/tickets/opera-gala/buy", headers={"accept-language": language})
                    assert page.status_code == 503  # the waiting page
                    assert '<p class="room">Opera gala</p>' in page.text
                    assert "Opera gala</title>" in page.text
        finally:
            await asyncio.gather(*(client.aclose() for client in inside))


async def test_korean_pages_break_between_words(redis_url: str) -> None:
    app = create_app(redis_url, rate=1, per=60.0)
    async with running(app), client_for(app) as first, client_for(app) as second:
        await first.get("/checkout")
        page = await second.get("/checkout", headers={"accept-language": "ko"})
        left = await second.post("/_queuegate/leave/checkout", headers={"accept-language": "ko"})
    for body in (page.text, left.text):
        assert 'lang="ko"' in body
        assert ":lang(ko), :lang(ja), :lang(zh) { word-break: keep-all;" in body


async def test_the_landing_page_says_the_checkout_s_pace_as_it_is_now(redis_url: str) -> None:
    """It said "2 people every 10 seconds" whatever the back office had set."""
    app = create_app(redis_url, rate=2, per=10.0)
    store = Store(connect(redis_url, 5.0))
    try:
        async with running(app), client_for(app) as visitor:
            assert "lets 2 people in every 10 seconds" in (await visitor.get("/")).text
            await store.configure("checkout", rate=5, per=20)
            home = (await visitor.get("/")).text
            assert "lets 5 people in every 20 seconds" in home
            assert "2 people" not in home
            await store.configure("checkout", status="paused")
            assert "lets nobody new in at the moment" in (await visitor.get("/")).text
    finally:
        await store.aclose()


def test_the_sale_s_length_is_a_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    with pytest.raises(SystemExit):
        demo_app.__main__.main(["--help"])
    assert "--sale-minutes" in capsys.readouterr().out
    made: dict[str, object] = {}
    monkeypatch.setenv("QUEUEGATE_REDIS_URL", redis_url)
    monkeypatch.setattr(demo_app.__main__, "create_app", lambda url, **options: made.update(options))
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)
    assert demo_app.__main__.main(["--port", str(free_port()), "--sale-minutes", "5"]) == 0
    assert made["sale_minutes"] == 5.0
    assert "fixed; --target-ms 300" in capsys.readouterr().out
    for wrong in ("inf", "nan", "0", "-5", "soon"):  # a landing page that answered 500, or no sale
        with pytest.raises(SystemExit):
            demo_app.__main__.main(["--sale-minutes", wrong])
        assert "--sale-minutes: must be a" in capsys.readouterr().err


async def test_the_landing_page_stays_up_when_redis_goes_away(own_server: EmbeddedServer) -> None:
    """The landing page is not gated: with Redis gone it still shows the
    sale, saying what it cannot know (it answered 500 before)."""
    app = create_app(own_server.url)
    async with running(app), client_for(app) as visitor:
        assert "100 of 100 left." in (await visitor.get("/")).text
        own_server.kill()
        home = await visitor.get("/")
    assert home.status_code == 200
    assert "Up to 100 left." in home.text
    assert "lets people in a few at a time" in home.text
