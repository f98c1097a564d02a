"""Identified users: one place per room across devices, and no borrowed places."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request

from queuegate import QueueGate, Room, admission
from queuegate.decisions import Admission

from .conftest import ALL_KINDS, MakeGate, client_for

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio


def user_of(request: Request) -> str | None:
    """Stands in for the app's own session: the user id from a header."""
    return request.headers.get("x-user")


async def shop(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
    """Releases the visitor's slot when the order is placed (``?done=1``)."""
    if scope["query_string"] == b"done=1":
        ticket = admission(scope)
        assert isinstance(ticket, Admission)
        await ticket.release()
    await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"shop"})  # type: ignore[operator]


async def gate_for(make_gate: MakeGate, **kw: object) -> QueueGate:
    return await make_gate(
        rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60.0)], identify=user_of, **kw
    )


async def position(client: httpx.AsyncClient, user: str | None = None) -> object:
    headers = {"accept": "application/json"}
    if user:
        headers["x-user"] = user
    response = await client.get("/checkout", headers=headers)
    return response.json().get("position") if response.status_code == 503 else response.status_code


def visitor_of(client: httpx.AsyncClient) -> str:
    return str(client.cookies["qg_sale"]).split(".")[0].split("~")[0]


async def test_a_user_holds_one_place_across_devices(make_gate: MakeGate) -> None:
    gate = await gate_for(make_gate)
    async with client_for(gate) as first, client_for(gate) as laptop, client_for(gate) as phone:
        assert await position(first, "someone") == 200
        assert await position(laptop, "alice") == 1
        assert await position(phone, "alice") == 1  # the same place, not a second one
        assert visitor_of(laptop) == visitor_of(phone)
        assert int((await gate.rooms["sale"].stats())["waiting"]) == 1
        # No user id in the cookie, only a keyed hash of it.
        assert "alice" not in str(phone.cookies["qg_sale"])


async def test_a_token_is_refused_for_another_user_or_nobody(make_gate: MakeGate) -> None:
    gate = await gate_for(make_gate)
    async with client_for(gate) as first, client_for(gate) as alice:
        await position(first, "someone")
        await position(alice, "alice")
        stolen = f"qg_sale={alice.cookies['qg_sale']}"
    async with client_for(gate) as mallory:
        for user in ("mallory", None):
            headers = {"cookie": stolen, "accept": "application/json"}
            if user:
                headers["x-user"] = user
            response = await mallory.get("/checkout", headers=headers)
            assert response.status_code == 403
            assert response.json()["state"] == "refused"
            assert "max-age=0" in response.headers["set-cookie"].lower()
        html = await mallory.get("/checkout", headers={"cookie": stolen, "x-user": "mallory"})
        assert "belongs to someone else" in html.text
        status = await mallory.get("/_queuegate/status/sale", headers={"cookie": stolen})
        assert status.status_code == 403
    assert gate.counters["refused"] == 4


async def test_signing_in_keeps_the_anonymous_place(make_gate: MakeGate) -> None:
    gate = await gate_for(make_gate)
    async with client_for(gate) as first, client_for(gate) as visitor:
        await position(first, "someone")
        assert await position(visitor) == 1
        anonymous_id = visitor_of(visitor)
        assert await position(visitor, "bob") == 1
        assert visitor_of(visitor) == anonymous_id
        assert "~" in str(visitor.cookies["qg_sale"])  # now bound to bob
        async with client_for(gate) as tablet:
            assert await position(tablet, "bob") == 1


async def test_after_release_the_user_joins_again_at_the_back(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], capacity=1)], identify=user_of, app=shop)
    async with client_for(gate) as laptop, client_for(gate) as phone, client_for(gate) as other:
        assert await position(laptop, "carol") == 200
        assert await position(phone, "carol") == 200  # her one place, on both devices
        assert await position(other, "dave") == 1
        placed = await laptop.get("/checkout?done=1", headers={"x-user": "carol"})
        assert placed.text == "shop"
        assert await position(other, "dave") == 200  # the freed slot
        # Carol's place is gone: coming back, on any device, is the back of the line.
        assert await position(phone, "carol") == 1
        assert await position(laptop, "carol") == 1
