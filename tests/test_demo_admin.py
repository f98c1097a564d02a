"""The demo's back office, in process, and the simulator against a served demo."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from demo_app import create_app
from queuegate.embedded import free_port

from .conftest import client_for, running, wait_for_http

pytestmark = pytest.mark.anyio

TOKEN = "admin-token-for-tests"


async def sign_in(admin: httpx.AsyncClient) -> None:
    """The demo's token sets its cookie; the back office's page gives the
    CSRF token that every change echoes in a header."""
    page = await admin.get(f"/admin-login?token={TOKEN}", follow_redirects=True)
    assert page.status_code == 200
    assert "queuegate back office" in page.text
    admin.headers["x-csrf-token"] = admin.cookies["queuegate_admin_csrf"]


async def test_back_office_needs_its_token_and_changes_rooms(redis_url: str) -> None:
    app = create_app(redis_url, admin_token=TOKEN)
    async with running(app), client_for(app) as visitor, client_for(app) as admin:
        await visitor.get("/checkout")
        assert (await admin.get("/admin/api/rooms")).status_code == 401
        # Each refusal says where the token is (the back office's said only
        # "Not signed in").
        for path in ("/admin/", "/shop-admin", "/admin-login?token=wrong", "/shop-admin/api/state"):
            refused = await admin.get(path)
            assert refused.status_code == 401, path
            assert "/admin-login?token=" in refused.text, path
            assert "QUEUEGATE_DEMO_ADMIN_TOKEN" in refused.text, path
        await sign_in(admin)
        stats = (await admin.get("/admin/api/rooms")).json()
        (room,) = stats["rooms"]
        assert (room["room"], room["active"], room["rate"]) == ("checkout", 1, 2)
        changed = await admin.post("/admin/api/rooms/checkout", json={"rate": 7, "status": "paused"})
        assert (changed.json()["rate"], changed.json()["status"]) == (7, "paused")
        (entry, *_) = (await admin.get("/admin/api/activity")).json()["activity"]
        assert (entry["who"], entry["room"], entry["details"]) == (
            "demo operator",
            "checkout",
            {"rate": 7, "status": "paused", "per": 10},  # per: kept with the rate
        )
        bad = await admin.post("/admin/api/rooms/checkout", json={"rate": -1})
        assert bad.status_code == 400
        assert "rate must be" in bad.json()["error"]
        unknown = await admin.post("/admin/api/rooms/nope", json={"rate": 1})
        assert unknown.status_code == 404
        assert "no room named 'nope'" in unknown.json()["error"]
        # Virtual visitors need the shop served: refused clearly in process.
        assert (await admin.post("/admin/api/simulate", json={"visitors": 5})).status_code == 409
        shop = (await admin.get("/shop-admin")).text
        assert "Shop controls" in shop
        # Its slow-checkout switch says what it shows on this checkout: a
        # fixed rate, and the flag that gives it a health target.
        assert "has a fixed rate (no health target)" in shop
        assert "--target-ms 300" in shop
        assert (await admin.post("/shop-admin/api/restock", json={})).json() == {"stock": 100}


async def test_the_back_office_slows_the_checkout_and_the_adaptive_room_follows(redis_url: str) -> None:
    app = create_app(redis_url, admin_token=TOKEN, rate=20, per=1.0, target_ms=150)
    async with running(app), client_for(app) as admin:
        await sign_in(admin)
        assert "keeps its p95 under 150 ms" in (await admin.get("/shop-admin")).text
        visitors = [client_for(app) for _ in range(40)]
        try:
            await asyncio.gather(*(v.get("/checkout") for v in visitors))  # 20 in, 20 waiting
            slow = await admin.post("/shop-admin/api/slow", json={"ms": 400})
            assert slow.json() == {"checkout_delay_ms": 400}
            assert (await admin.post("/shop-admin/api/slow", json={"ms": -5})).status_code == 400
            started = time.monotonic()
            rate = 20
            while rate >= 20 and time.monotonic() - started < 30:
                inside = [
                    v
                    for v in visitors
                    if (await v.get("/_queuegate/status/checkout")).json()["state"] == "active"
                ]
                await asyncio.gather(*(v.get("/checkout") for v in inside))
                (room,) = (await admin.get("/admin/api/rooms")).json()["rooms"]
                rate = room["rate"]
        finally:
            await asyncio.gather(*(v.aclose() for v in visitors))
        assert rate < 20, room
        assert room["health_changed"].startswith("cut: p95")
        assert room["p95_ms"] >= 400
        # The operator pins a rate, then gives it back.
        pinned = (await admin.post("/admin/api/rooms/checkout", json={"rate": 9})).json()
        assert (pinned["rate"], pinned["pinned"]) == (9, 1)
        back = (await admin.post("/admin/api/rooms/checkout", json={"pinned": None})).json()
        assert back["pinned"] == 0


def test_queuegate_simulate_against_the_served_demo(redis_url: str) -> None:
    port = free_port()
    env = {**os.environ, "QUEUEGATE_REDIS_URL": redis_url}
    demo = subprocess.Popen(
        [sys.executable, "-m", "demo_app", "--port", str(port), "--rate", "5", "--per", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        wait_for_http(f"http://127.0.0.1:{port}/")
        result = subprocess.run(
            [sys.executable, "-m", "queuegate", "simulate", "--url", f"http://127.0.0.1:{port}/checkout",
             "--visitors", "30", "--concurrency", "30", "--give-up", "0.2", "--patience", "0.5", "2",
             "--seed", "3", "--json", "--max-seconds", "60"],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["errors"] == 0
        assert summary["admitted"] + summary["gave_up"] == 30
        assert summary["admitted"] >= 5
        assert summary["gave_up"] >= 1
        assert summary["wait_p90_s"] >= summary["wait_p50_s"] >= 0
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(10)
