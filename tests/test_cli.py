"""The console, run as a subprocess against the test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio
import httpx
import pytest

from queuegate import Room
from queuegate.embedded import free_port

from .conftest import MakeGate, client_for, wait_for_http

SALE = Room("sale", paths=["/checkout*"], rate=2, per=60.0)


def cli(*args: str, url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    if url:
        env["QUEUEGATE_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "queuegate", *args], capture_output=True, text=True, env=env, timeout=30
    )


@pytest.fixture
async def busy_room(make_gate: MakeGate, redis_url: str) -> str:
    gate = await make_gate(rooms=[SALE])
    clients = [client_for(gate) for _ in range(5)]
    for client in clients:
        await client.get("/checkout")
        await client.aclose()
    return redis_url


@pytest.mark.anyio
async def test_list_and_show(busy_room: str) -> None:
    listing = cli("list", url=busy_room)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split()[:4] == ["room", "status", "waiting", "active"]
    assert row.split()[:4] == ["sale", "open", "3", "2"]
    data = json.loads(cli("list", "--json", url=busy_room).stdout)
    assert (data[0]["room"], data[0]["waiting"], data[0]["per"]) == ("sale", 3, 60.0)
    shown = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert len(shown["visitors"]["waiting"]) == 3
    # Two went straight in (a wait of 0), three joined this minute.
    assert shown["analytics"]["waits"]["admitted"]["count"] == 2
    assert sum(minute["joined"] for minute in shown["analytics"]["minutes"]) == 3  # a minute may turn
    text = cli("show", "sale", url=busy_room).stdout
    assert "rate: 2" in text
    assert "waits of those admitted: 2 (p50 2 s" in text
    assert "waits of those who gave up: 0" in text


@pytest.mark.anyio
async def test_set_release_remove_drain_seed(busy_room: str) -> None:
    changed = cli("set", "sale", "--rate", "10", "--status", "paused", url=busy_room)
    assert changed.returncode == 0, changed.stderr
    shown = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert (shown["rate"], shown["status"]) == (10, "paused")
    assert cli("set", "sale", "--reset", "rate", url=busy_room).returncode == 0
    assert json.loads(cli("show", "sale", "--json", url=busy_room).stdout)["rate"] == 2
    first_waiting = shown["visitors"]["waiting"][0][0]
    first_active = shown["visitors"]["active"][0][0]
    assert "removed" in cli("remove", "sale", first_waiting, url=busy_room).stdout
    assert "released" in cli("release", "sale", first_active, url=busy_room).stdout
    assert "held no place" in cli("release", "sale", first_active, url=busy_room).stdout
    refused = cli("drain", "sale", url=busy_room)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "--yes" in refused.stderr
    assert "2 visitors removed" in cli("drain", "sale", "--yes", url=busy_room).stdout
    seed = json.loads(cli("seed", "sale", "--json", url=busy_room).stdout)
    assert len(seed["seed"]) == 32
    assert len(seed["seed_sha256"]) == 64


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("show", "nope"), 1, "no room named 'nope'"),
        (("set", "nope", "--rate", "3"), 1, "no room named 'nope'"),
        (("set", "sale", "--rate", "-3"), 2, "rate must be a whole number >= 0"),
        (("set", "sale", "--status", "ajar"), 2, "status must be one of"),
        (("set", "sale", "--opens-at", "tomorrow"), 2, "opens_at must be an ISO 8601 time"),
        (("set", "sale"), 2, "name at least one setting"),
        (("set", "sale", "--reset", "speed"), 2, "unknown setting 'speed'"),
    ],
)
async def test_clear_errors_change_nothing(
    busy_room: str, args: tuple[str, ...], status: int, message: str
) -> None:
    result = cli(*args, url=busy_room)
    assert result.returncode == status
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    after = json.loads(cli("show", "sale", "--json", url=busy_room).stdout)
    assert (after["rate"], after["status"]) == (2, "open")


def test_unreachable_redis_and_missing_url() -> None:
    down = cli("list", url="redis://127.0.0.1:1/0")
    assert down.returncode == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in down.stderr
    secret = cli("list", url="redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in secret.stderr
    assert "redis://:***@127.0.0.1:1/0" in secret.stderr
    missing = cli("list", url=None)
    assert missing.returncode == 2
    assert "QUEUEGATE_REDIS_URL" in missing.stderr


@pytest.mark.anyio
async def test_serve_admin_serves_the_back_office_behind_its_secret(busy_room: str) -> None:
    await anyio.to_thread.run_sync(serve_admin_and_sign_in, busy_room)


def serve_admin_and_sign_in(redis_url: str) -> None:
    assert "QUEUEGATE_ADMIN_SECRET" in cli("serve-admin", url=redis_url).stderr  # no secret: refused
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env.update(QUEUEGATE_REDIS_URL=redis_url, QUEUEGATE_ADMIN_SECRET="serve-admin-secret")
    server = subprocess.Popen(
        [sys.executable, "-m", "queuegate", "serve-admin", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/login")
        with httpx.Client(base_url=base) as operator:
            assert operator.get("/api/rooms").status_code == 401
            assert operator.post("/login", data={"secret": "serve-admin-secret"}).status_code == 303
            (room,) = operator.get("/api/rooms").json()["rooms"]
            assert (room["room"], room["waiting"]) == ("sale", 3)
    finally:
        server.terminate()
        server.wait(10)
