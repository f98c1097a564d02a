"""The examples in examples/ work as their docstrings say: a waiting visitor
waits, an admitted one passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from queuegate.embedded import free_port

from .conftest import SECRET, client_for, wait_for_http
from .test_routers import oracle, raw_request, request_bytes

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


async def test_fastapi_shop(redis_url: str) -> None:
    from examples.fastapi_shop import create_app

    gate = create_app(admin_secret="an-operator-secret", secret_key=SECRET, redis=redis_url, environ={})
    try:
        async with client_for(gate) as a, client_for(gate) as b, client_for(gate) as c:
            assert (await a.get("/checkout")).json()["checkout"] == "your turn"
            assert (await b.get("/checkout")).status_code == 200
            waiting = await c.get("/checkout")  # capacity 2: the line
            assert waiting.status_code == 503
            assert "text/html" in waiting.headers["content-type"]
            assert (await a.post("/checkout")).json() == {"order": "placed"}  # releases a's slot
            assert (await c.get("/checkout")).status_code == 200
            assert (await a.get("/tickets/7/buy")).json() == {"event": "7", "ticket": "yours"}
            # The back office mounted in the FastAPI app shows both rooms.
            assert (await a.get("/admin/api/rooms")).status_code == 401
            signed_in = await a.post("/admin/login", data={"secret": "an-operator-secret"})
            assert signed_in.status_code == 303
            rooms = (await a.get("/admin/api/rooms")).json()["rooms"]
            assert {room["room"] for room in rooms} == {"sale", "ticket-7"}
        assert "ticket-7" in await gate.store.room_names()
    finally:
        await gate.store.aclose()


def documented(module: str) -> list[str]:
    """The example's `uvicorn ...` line, as its docstring writes it (up to a comment)."""
    text = (ROOT / module).read_text()
    line = next(line.strip() for line in text.splitlines() if line.strip().startswith("uvicorn "))
    return line.split("#", 1)[0].split()


@contextmanager
def uvicorn(command: list[str], redis_url: str, **environ: str) -> Iterator[int]:
    """``command`` (``uvicorn ...``) run in the clone as a user runs it, on a
    free port, with the Redis and secret key in its environment: the port,
    once it answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env.update(QUEUEGATE_REDIS_URL=redis_url, QUEUEGATE_SECRET_KEY=SECRET, **environ)
    process = subprocess.Popen(
        [sys.executable, "-m", *command, "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", seconds=30)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def fastapi_shop(redis_url: str) -> Iterator[str]:
    """The FastAPI example run as its docstring says, over plain http."""
    command = documented("examples/fastapi_shop.py")
    with uvicorn(command, redis_url, QUEUEGATE_ADMIN_SECRET="choose-a-long-one") as port:
        yield f"http://127.0.0.1:{port}"


def test_fastapi_shop_over_plain_http_as_its_docstring_says(fastapi_shop: str) -> None:
    # httpx, like any client, sends no Secure cookie over http: the cookies
    # must not be Secure there, or every request is a new visitor.
    a, b, c = (httpx.Client(base_url=fastapi_shop) for _ in range(3))
    with a, b, c:
        assert a.get("/checkout").json()["checkout"] == "your turn"
        assert b.get("/checkout").status_code == 200
        assert c.get("/checkout", headers={"accept": "application/json"}).json()["position"] == 1
        assert a.post("/checkout").json() == {"order": "placed"}  # a's slot goes to c
        assert c.get("/checkout").json()["checkout"] == "your turn"
        assert b.post("/checkout").json() == {"order": "placed"}
    # The console's virtual visitors against it (before: 5 admitted, the rest
    # errors "unexpected state 'none'"): 5 every 10 s, the rest still waiting.
    command = [sys.executable, "-m", "queuegate", "simulate", "--url", f"{fastapi_shop}/tickets/7/buy"]
    command += ["--visitors", "8", "--give-up", "0", "--max-seconds", "3", "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["admitted"], summary["still_waiting"], summary["errors"]) == (5, 3, 0), summary


async def test_django_site_with_its_session_feeding_identify(redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")
    from examples.django_site.asgi import create_app

    gate = create_app(secret_key=SECRET, redis=redis_url, environ={})
    try:
        async with client_for(gate) as phone, client_for(gate) as laptop, client_for(gate) as bob:
            for device in (phone, laptop):
                assert (await device.get("/login", params={"user": "alice"})).status_code == 200
            await bob.get("/login", params={"user": "bob"})
            assert (await phone.get("/checkout")).text == "checkout for alice"
            assert (await bob.get("/checkout")).status_code == 503  # capacity 1: bob waits
            # Alice's laptop holds the same place as her phone, not a second one.
            assert (await laptop.get("/checkout")).text == "checkout for alice"
            assert (await gate.rooms["sale"].stats())["waiting"] == 1
            assert (await bob.get("/tickets/9/buy")).text == "ticket for 9"  # an async view
    finally:
        await gate.store.aclose()


@pytest.fixture
def behind_proxy(redis_url: str) -> Iterator[int]:
    # (Its docstring's line without the proxy's flags: the test is the proxy.)
    command = ["uvicorn", "examples.behind_proxy:create_app", "--factory", "--lifespan", "on"]
    with uvicorn([*command, "--root-path", "/shop"], redis_url) as port:
        yield port


def test_starlette_behind_a_proxy_prefix(behind_proxy: int) -> None:
    base = f"http://127.0.0.1:{behind_proxy}"
    # The proxy strips /shop: the app gets /checkout, uvicorn adds root_path.
    with httpx.Client() as first, httpx.Client() as second:
        assert first.get(base + "/checkout").text == "checkout"
        waiting = second.get(base + "/checkout/pay")
        assert waiting.status_code == 503
        assert "/shop/_queuegate/status/sale" in waiting.text  # back through the proxy
        status = second.get(base + "/_queuegate/status/sale")
        assert status.json()["state"] == "waiting"
    stranger = raw_request(behind_proxy, request_bytes("GET", "/checkout/.."))
    assert stranger.startswith(b"HTTP/1.1 503")
    assert oracle(stranger) == []


async def test_django_login_without_a_user_is_a_400_with_a_form(redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")
    from examples.django_site.asgi import create_app

    gate = create_app(secret_key=SECRET, redis=redis_url, environ={})
    try:
        async with client_for(gate) as visitor:
            for params in ({}, {"user": "  "}):
                page = await visitor.get("/login", params=params)
                assert page.status_code == 400
                assert "<input name='user' required>" in page.text
            shown = await visitor.get("/login", params={"user": "<b>eve</b>"})
            assert shown.text == "signed in as &lt;b&gt;eve&lt;/b&gt;"
    finally:
        await gate.store.aclose()


async def test_each_example_keeps_its_rooms_apart_and_names_its_extra(redis_url: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")
    from examples import behind_proxy, fastapi_shop
    from examples.django_site import asgi

    gates = [
        module.create_app(secret_key=SECRET, redis=redis_url, environ={})
        for module in (fastapi_shop, asgi, behind_proxy)
    ]
    try:
        # Each has a "sale" room; on one Redis they must not be one line.
        assert sorted(gate.store.prefix for gate in gates) == [
            "example-django",
            "example-fastapi",
            "example-proxy",
        ]
    finally:
        for gate in gates:
            await gate.store.aclose()
    extras = (ROOT / "pyproject.toml").read_text()
    assert 'examples = [\n    "queuegate[embedded]",' in extras
    for needed in ('"fastapi>=', '"django>=', '"uvicorn[standard]>='):
        assert needed in extras.split("examples = [", 1)[1].split("]\n", 1)[0]
    for module in (fastapi_shop, asgi, behind_proxy):
        # From the clone: the bare name asks PyPI, where it is not this project.
        assert 'pip install -e ".[examples]"`` in the clone' in " ".join((module.__doc__ or "").split())
        assert "queuegate[examples]" not in (module.__doc__ or "")


def test_the_django_example_starts_with_the_command_its_docstring_gives(redis_url: str) -> None:
    """Its `uvicorn ...` line, as written, in the clone: the server starts
    and the gated route answers. (It was given `--lifespan on`, which
    Django refuses: the server did not start.)"""
    with uvicorn(documented("examples/django_site/asgi.py"), redis_url) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/checkout").status_code in (200, 503)
