"""Redis killed during traffic, in a closed room: visitors admitted before the
outage keep passing until their sessions end, nobody new gets in, every
request is answered within the timeout, and the gate recovers by itself.
Checked all through the outage, not only at its start.

QGDEV_OUTAGE_SECONDS sets the outage's length (3 s in the suite; the
figures in the README come from a 30 s run with ``pytest -s``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter

import pytest

from queuegate import Room, Store
from queuegate.embedded import EmbeddedServer
from queuegate.store import connect

from .conftest import MakeGate, call_asgi, http_scope, lifespan_app, running
from .stalls import Stalls

pytestmark = pytest.mark.anyio

OUTAGE = float(os.environ.get("QGDEV_OUTAGE_SECONDS", "3"))
TIMEOUT = 0.2
MARGIN = 0.15
SHORT_SESSION = OUTAGE / 2 + 0.5  # ends in the middle of the outage


async def test_admitted_visitors_pass_through_an_outage_until_their_sessions_end(
    make_gate: MakeGate, own_server: EmbeddedServer
) -> None:
    rooms = [
        Room("long", paths=["/long*"], capacity=3, session=600, client_limit=0),
        Room("short", paths=["/short*"], capacity=3, session=SHORT_SESSION, client_limit=0),
    ]
    gate = await make_gate(rooms=rooms, redis=own_server.url, timeout=TIMEOUT)

    async def get(path: str, cookie: str = "") -> tuple[int, tuple[float, float], str]:
        headers = [(b"cookie", cookie.encode())] if cookie else []
        start = time.monotonic()
        status, answer, _ = await call_asgi(gate, http_scope(path, headers=headers))
        return status, (start, time.monotonic()), answer.get("set-cookie", "").split(";")[0]

    cookies = {}
    for path in ("/long", "/short"):
        status, _, cookies[path] = await get(path)
        assert status == 200
    short_ends = time.monotonic() + SHORT_SESSION
    own_server.kill()
    killed_at = time.monotonic()
    seen: Counter[str] = Counter()
    taken: list[tuple[str, float, float]] = []
    with Stalls() as stalls:
        while time.monotonic() - killed_at < OUTAGE:
            for who, path, cookie in (
                ("admitted", "/long", cookies["/long"]),
                ("short", "/short", cookies["/short"]),
                ("newcomer", "/long", ""),
            ):
                status, (began, ended), _ = await get(path, cookie)
                taken.append((who, began, ended))
                now = time.monotonic()
                if who == "admitted":
                    assert status == 200, now - killed_at
                elif who == "newcomer":
                    assert status == 503
                elif now < short_ends - 0.05:
                    assert status == 200, now - killed_at
                elif now > short_ends + 0.05:
                    assert status == 503, now - killed_at  # its session ended during the outage
                seen[f"{who} {status}"] += 1
            await asyncio.sleep(0.05)
    # Each answered within the timeout (beyond the process's stalls).
    late = stalls.late(taken, TIMEOUT + MARGIN)
    assert not late, late
    slowest = max(ended - began for _, began, ended in taken)
    own_server.start()
    deadline = time.monotonic() + 5
    while (await get("/long", cookies["/long"]))[0] != 200:
        assert time.monotonic() < deadline, "the gate did not recover"
        await asyncio.sleep(0.05)
    # The server came back empty (no persistence): the line starts again.
    assert (await gate.rooms["long"].stats())["active"] >= 1
    print(f"\noutage {OUTAGE:.0f} s: {dict(seen)}; slowest answer {slowest * 1000:.0f} ms")
    for outcome in ("admitted 200", "short 200", "short 503", "newcomer 503"):
        assert seen[outcome] > 0, outcome


async def test_a_visitor_who_left_is_not_let_through_an_outage(
    make_gate: MakeGate, own_server: EmbeddedServer
) -> None:
    """An auditor: a visitor who left (their cookie kept, replayed) passed
    the gate for the rest of their session while Redis did not answer, in
    every process, the one that served the leave among them: the cookie's
    admission was trusted, though the process had heard it end. An end
    heard before the outage is remembered: that cookie gets the fail mode,
    while a visitor still admitted passes, and the status endpoint says so
    of each (it said 'unavailable' of one the gate let through). (Heard
    here from another process's leave, through the subscription.)"""
    room = Room("long", paths=["/long*"], capacity=3, session=600, client_limit=0)
    gate = await make_gate(lifespan_app, rooms=[room], redis=own_server.url, timeout=TIMEOUT)
    other = Store(connect(own_server.url, 5.0))  # another process
    try:
        async with running(gate):

            async def get(cookie: str = "") -> tuple[int, str]:
                headers = [(b"cookie", cookie.encode())] if cookie else []
                status, answer, _ = await call_asgi(gate, http_scope("/long", headers=headers))
                return status, answer.get("set-cookie", "").split(";")[0]

            gate.store.invalidations.start()  # (else at the first request)
            await asyncio.wait_for(gate.store.invalidations.subscribed.wait(), 5)
            status, stays = await get()
            assert status == 200
            status, leaves = await get()
            assert status == 200
            scope = http_scope("/long", headers=[(b"cookie", leaves.encode())])
            visitor = (await gate.visitors.read(room, scope)).visitor
            assert visitor is not None
            assert gate.store.admissions.admitted_until("long", visitor) is not None  # copied
            assert await other.leave("long", visitor)
            deadline = time.monotonic() + 5
            while gate.store.admissions.admitted_until("long", visitor) is not None:  # the leave heard
                assert time.monotonic() < deadline, "the leave was not heard"
                await asyncio.sleep(0.02)
            os.kill(own_server.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                for _ in range(3):
                    assert (await get(stays))[0] == 200
                    assert (await get(leaves))[0] == 503
                    # The status endpoint says what the gate does (it said
                    # 'unavailable' of one it let through).
                    for cookie, said in ((stays, (200, "active")), (leaves, (503, "unavailable"))):
                        scope = http_scope("/_queuegate/status/long", headers=[(b"cookie", cookie.encode())])
                        status, _, body = await call_asgi(gate, scope)
                        assert (status, json.loads(body)["state"]) == said
                    await asyncio.sleep(0.5)
            finally:
                os.kill(own_server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    finally:
        await other.aclose()
