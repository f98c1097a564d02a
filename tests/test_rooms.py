"""Rooms per event from a template, bypass rules, and the operator's handle."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from queuegate import ConfigError, QueueGate, Room
from queuegate.rooms import Rooms

from .conftest import ALL_KINDS, MakeGate, client_for

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio

TICKETS = Room("ticket-{event}", paths=["/tickets/{event}/buy*"], rate=1, per=60.0)


async def test_each_event_gets_its_own_line_on_first_visit(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[TICKETS])
    async with client_for(gate) as a, client_for(gate) as b:
        assert (await a.get("/tickets/42/buy")).status_code == 200
        assert (await b.get("/tickets/42/buy")).status_code == 503  # 42's token is spent
        assert (await b.get("/tickets/43/buy")).status_code == 200  # 43 is another line
        assert "qg_ticket-42" in b.cookies
        assert "qg_ticket-43" in b.cookies
    assert sorted(await gate.store.room_names()) == ["ticket-42", "ticket-43"]
    stats = await gate.rooms["ticket-42"].stats()
    assert (stats["active"], stats["waiting"]) == (1, 1)
    # Every key of a derived room shares its hash tag.
    assert all("{ticket-42}" in key for key in gate.store.keys("ticket-42"))
    with pytest.raises(KeyError):
        gate.rooms["concert-42"]


async def test_event_ids_that_are_not_plain_get_a_hashed_room(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[TICKETS])
    async with client_for(gate) as a, client_for(gate) as b:
        assert (await a.get("/tickets/Big%20Night!/buy")).status_code == 200
        waiting = await b.get("/tickets/big%20night!/buy", headers={"accept": "application/json"})
        assert waiting.status_code == 503  # same event, whatever the case
        (name,) = await gate.store.room_names()
        assert name.startswith("ticket-h")
        status = await b.get(f"/_queuegate/status/{name}")
        assert status.json()["state"] == "waiting"


async def test_first_matching_room_wins(make_gate: MakeGate) -> None:
    vip = Room("vip", paths=["/tickets/vip/buy"], capacity=100)
    gate = await make_gate(rooms=[vip, TICKETS])
    assert gate.match("/tickets/VIP/buy") == vip
    room = gate.match("/tickets/7/buy/now")
    assert room is not None
    assert room.name == "ticket-7"


async def test_a_template_titles_each_room_from_its_values(make_gate: MakeGate) -> None:
    shows = {"jazz": "Jazz & <b>Blues</b>"}
    seen: list[dict[str, str]] = []

    def title(values: Mapping[str, str]) -> str:
        seen.append(dict(values))
        return shows.get(values["event"], "Tickets")

    tickets = Room("ticket-{event}", paths=["/tickets/{event}/buy*"], rate=1, per=60.0, title=title)
    gate = await make_gate(rooms=[tickets])
    async with client_for(gate) as a, client_for(gate) as b:
        await a.get("/tickets/JAZZ/buy")
        waiting = await b.get("/tickets/jazz/buy")
        assert waiting.status_code == 503
        assert '<p class="room">Jazz &amp; &lt;b&gt;Blues&lt;/b&gt;</p>' in waiting.text
        assert "<b>Blues</b>" not in waiting.text
        assert (await b.get("/tickets/rock/buy")).status_code == 200
    assert seen == [{"event": "jazz"}, {"event": "rock"}]  # once a room: derived rooms are cached
    # Found by its name alone (a status poll, the console, another process),
    # a room gets the title its first visit gave it.
    elsewhere = Rooms([tickets], gate.store)
    assert elsewhere["ticket-jazz"].room.title_in("ko") == "Jazz & <b>Blues</b>"
    assert elsewhere["ticket-opera"].room.title_in("en") == "Tickets"
    assert tickets.title_in("en") == ""  # the template itself: no title, never its name


def test_a_title_function_is_for_template_rooms() -> None:
    with pytest.raises(ConfigError, match="template room"):
        Room("sale", paths=["/sale"], rate=1, title=lambda values: "Sale")


def test_template_paths_must_carry_the_placeholders() -> None:
    with pytest.raises(ConfigError, match=r"\{event\}"):
        Room("ticket-{event}", paths=["/tickets/buy"], rate=1)


async def test_bypass_rules_pass_untouched_before_any_redis_call(make_gate: MakeGate) -> None:
    secret = "let-me-in-0123456789"
    # Redis is unreachable and the room fails closed: only bypassed requests pass.
    gate = await make_gate(
        rooms=[Room("sale", paths=["/checkout*"], rate=1)],
        redis="redis://127.0.0.1:1/0",
        timeout=0.1,
        bypass_paths=["/checkout/health", "/checkout/static/*"],
        bypass_secret=secret,
        bypass_networks=["10.0.0.0/8"],
    )
    async with client_for(gate) as client:
        assert (await client.get("/checkout/health")).status_code == 200
        assert (await client.get("/checkout/static/app.css")).status_code == 200
        assert (await client.get("/checkout/static/../pay")).status_code == 503
        assert (await client.get("/checkout", headers={"x-queuegate-bypass": secret})).status_code == 200
        assert (await client.get("/checkout", headers={"x-queuegate-bypass": "guess"})).status_code == 503
        assert (await client.get("/checkout")).status_code == 503
    import httpx

    office = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate, client=("10.1.2.3", 5000)), base_url="https://shop.test"
    )
    async with office:
        assert (await office.get("/checkout")).status_code == 200
    assert gate.counters["bypassed"] == 4


async def test_room_control_api(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60.0)])
    sale = gate.rooms["sale"]
    async with client_for(gate) as a, client_for(gate) as b, client_for(gate) as c:
        await a.get("/checkout")
        await b.get("/checkout")
        await c.get("/checkout")
        line = await sale.visitors()
        assert len(line["active"]) == 1
        assert len(line["waiting"]) == 2
        await sale.configure(rate=5)
        # The new rate applies from the next refill; drain empties the line.
        assert await sale.drain() == 2
        assert (await sale.stats())["drained"] == 2
        json_b = await b.get("/checkout", headers={"accept": "application/json"})
        assert json_b.json()["position"] == 1  # back of an empty line
        first_visitor = line["active"][0][0]
        assert await sale.release(first_visitor)
        assert not await sale.leave(first_visitor)
    assert list(gate.rooms) == ["sale"]


async def test_concurrent_operators_and_visitors(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], capacity=5)])
    sale = gate.rooms["sale"]
    clients = [client_for(gate) for _ in range(40)]
    samples: list[int] = []

    async def operator() -> None:
        for capacity in (2, 8, 3, 6, 4):
            await sale.configure(capacity=capacity)
            samples.append(int((await sale.stats())["active"]))
            await asyncio.sleep(0.01)

    try:
        await asyncio.gather(operator(), *(c.get("/checkout") for c in clients))
        for _ in range(3):
            await asyncio.gather(*(c.get("/checkout") for c in clients))
        stats = await sale.stats()
        # Capacity only binds admissions: 4 now, however many were let in at 8.
        assert stats["capacity"] == 4
        assert stats["active"] <= 8
        assert stats["active"] + stats["waiting"] == 40
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def test_gate_rejects_bad_bypass_settings() -> None:
    from .conftest import SECRET, ok_app

    room = Room("sale", paths=["/checkout*"], rate=1)
    for bad, named in (
        ({"bypass_networks": ["not-a-net"]}, "bypass_networks"),
        ({"bypass_paths": "/health"}, "bypass_paths"),
        ({"bypass_secret": "short"}, "bypass_secret"),
    ):
        with pytest.raises(ConfigError, match=named):
            QueueGate(ok_app, rooms=[room], secret_key=SECRET, redis="redis://x", environ={}, **bad)
