"""The gate end to end: real Redis, requests through httpx's ASGITransport."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time

import httpx
import pytest
from itsdangerous import TimestampSigner
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from queuegate import QueueGate, Room, admission

from .conftest import ALL_KINDS, SECRET, MakeGate, call_asgi, client_for, http_scope, lifespan_app, running

# Run on every kind of server: Redis, Valkey and a Redis Cluster.
SERVER_KINDS = ALL_KINDS

pytestmark = pytest.mark.anyio


def sale(**kw: object) -> Room:
    options: dict[str, object] = {"rate": 1, "per": 60.0}
    options.update(kw)
    return Room("sale", paths=["/checkout*"], **options)  # type: ignore[arg-type]


async def test_first_visit_with_room_goes_straight_to_the_app(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as client:
        response = await client.get("/checkout")
    assert (response.status_code, response.text) == (200, "app:/checkout")
    assert "qg_sale" in response.cookies


async def test_paths_outside_rooms_pass_untouched(make_gate: MakeGate) -> None:
    # Redis is unreachable: an ungated path must not even ask it.
    gate = await make_gate(rooms=[sale()], redis="redis://127.0.0.1:1/0")
    async with client_for(gate) as client:
        response = await client.get("/products")
    assert (response.status_code, response.text) == (200, "app:/products")
    assert "set-cookie" not in response.headers


async def test_200_concurrent_first_visits_rate_10(make_gate: MakeGate) -> None:
    per = 0.3
    # The time limit is generous: this test is about the line, not a slow Redis.
    gate = await make_gate(rooms=[sale(rate=10, per=per)], timeout=2.0)
    clients = [client_for(gate) for _ in range(200)]
    try:
        start = time.monotonic()
        responses = await asyncio.gather(
            *(c.get("/checkout", headers={"accept": "application/json"}) for c in clients)
        )
        assert sum(r.status_code == 200 for r in responses) == 10
        positions = {
            _visitor_id(c): r.json()["position"]
            for c, r in zip(clients, responses, strict=True)
            if r.status_code == 503
        }
        assert sorted(positions.values()) == list(range(1, 191))
        # As intervals pass they are admitted in arrival order, 10 per interval.
        order = sorted(positions, key=positions.__getitem__)
        keys = gate.store.keys("sale")
        deadline = start + 30
        admitted: list[str] = []
        while len(admitted) < 190 and time.monotonic() < deadline:
            await asyncio.sleep(per / 3)
            await asyncio.gather(*(c.get("/_queuegate/status/sale") for c in clients))
            members = await gate.store.client.zrange(keys[3], 0, -1)
            active = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
            admitted = [v for v in order if v in active]
            assert admitted == order[: len(admitted)], "admitted out of arrival order"
            intervals = int((time.monotonic() - start) / per)
            assert len(admitted) <= 10 * intervals
        assert admitted == order
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


def _position_in(response: httpx.Response) -> int:
    found = re.search(r'id="qg-position">(\d+)<', response.text)
    assert found is not None
    return int(found[1])


def _visitor_id(client: httpx.AsyncClient, room: str = "sale") -> str:
    return str(client.cookies[f"qg_{room}"]).split(".")[0].split("~")[0]


async def test_capacity_is_never_exceeded_and_release_admits_next(make_gate: MakeGate) -> None:
    inside = 0
    most_inside = 0

    async def shop(request: Request) -> PlainTextResponse:
        nonlocal inside, most_inside
        inside += 1
        most_inside = max(most_inside, inside)
        await asyncio.sleep(0.01)
        inside -= 1
        ticket = admission(request)
        assert ticket is not None
        if request.query_params.get("done"):
            await ticket.release()
        return PlainTextResponse("bought")

    app = Starlette(routes=[Route("/checkout", shop)])
    gate = await make_gate(app, rooms=[Room("sale", paths=["/checkout"], capacity=3)], timeout=2.0)
    room = gate.rooms["sale"]
    clients = [client_for(gate) for _ in range(30)]
    samples: list[int] = []

    async def sample() -> None:
        for _ in range(40):
            samples.append(int((await room.stats())["active"]))
            await asyncio.sleep(0.005)

    try:
        first, _ = await asyncio.gather(asyncio.gather(*(c.get("/checkout") for c in clients)), sample())
        holders = [c for c, r in zip(clients, first, strict=True) if r.status_code == 200]
        assert len(holders) == 3
        assert max(samples) <= 3
        # One holder finishes: the head of the line is admitted at once.
        waiters = [c for c, r in zip(clients, first, strict=True) if r.status_code == 503]
        head = min(waiters, key=lambda c: _position_in(first[clients.index(c)]))
        assert (await head.get("/checkout")).status_code == 503
        assert (await holders[0].get("/checkout?done=1")).status_code == 200
        assert (await head.get("/checkout")).status_code == 200
        assert int((await room.stats())["active"]) == 3
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def test_waiting_page_html(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        response = await second.get("/checkout")
    assert response.status_code == 503
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    assert int(response.headers["retry-after"]) >= 1
    assert "script-src 'sha256-" in response.headers["content-security-policy"]
    body = response.text
    assert 'id="qg-position">1<' in body
    assert "nobody: you are next" in body
    assert re.search(r'id="qg-eta">(about \d+ (seconds|minutes?)|a few seconds)<', body)
    assert 'data-status="/_queuegate/status/sale"' in body
    assert '<meta http-equiv="refresh"' in body


async def test_waiting_page_csp_hash_matches_its_script(make_gate: MakeGate) -> None:
    import base64

    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        response = await second.get("/checkout")
    script = re.search(r"<script>(.*?)</script>", response.text, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script[1].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in response.headers["content-security-policy"]


@pytest.mark.parametrize("status", [503, 429, 200])
async def test_json_for_apps_with_configured_status(make_gate: MakeGate, status: int) -> None:
    gate = await make_gate(rooms=[sale(rate=1, per=30.0)], waiting_status=status)
    headers = {"accept": "application/json"}
    async with client_for(gate) as first, client_for(gate) as second, client_for(gate) as third:
        await first.get("/checkout", headers=headers)
        await second.get("/checkout", headers=headers)
        response = await third.get("/checkout", headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    data = response.json()
    assert data["state"] == "waiting"
    assert (data["position"], data["ahead"], data["line"]) == (2, 1, 2)
    # Two ahead of the next refill in 30 s at 1 per interval: 2 intervals.
    assert 30 < data["eta_seconds"] <= 60
    assert data["poll_after_seconds"] == int(response.headers["retry-after"])


async def test_browser_accept_header_gets_html(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        response = await second.get("/checkout", headers={"accept": accept})
    assert response.headers["content-type"].startswith("text/html")


async def test_cookie_flags(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as client:
        cookie = (await client.get("/checkout")).headers["set-cookie"]
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=lax", "path=/", "secure"} <= flags
    value = cookie.split(";")[0].split("=", 1)[1]
    payload, _, _ = value.split(".")
    # A random id, no user (anonymous), and the end of the admission in
    # Redis time (for outages); nothing else.
    visitor, user, until = payload.split("~")
    assert len(visitor) == 16
    assert user == ""
    now = (await gate.rooms["sale"].stats())["now"]
    assert 590_000 < int(until) - now <= 600_000  # the session: 600 s

    plain = await make_gate(rooms=[sale()], cookie_secure=False)
    async with client_for(plain) as client:
        assert "secure" not in (await client.get("/checkout")).headers["set-cookie"].lower()


async def _position(client: httpx.AsyncClient) -> int:
    response = await client.get("/checkout", headers={"accept": "application/json"})
    return -1 if response.status_code == 200 else int(response.json()["position"])


async def test_reload_keeps_place_and_leave_goes_to_the_back(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    clients = [client_for(gate) for _ in range(4)]
    try:
        assert [await _position(c) for c in clients] == [-1, 1, 2, 3]
        assert [await _position(c) for c in clients[1:]] == [1, 2, 3]  # reload
        left = await clients[1].post("/_queuegate/leave/sale", headers={"accept": "application/json"})
        assert left.json()["state"] == "left"
        assert "max-age=0" in left.headers["set-cookie"].lower()
        assert [await _position(c) for c in clients[2:]] == [1, 2]
        assert await _position(clients[1]) == 3
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def test_session_expiry_puts_the_visitor_at_the_back(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale(rate=1, per=60.0, session=0.3)])
    async with client_for(gate) as a, client_for(gate) as b:
        assert await _position(a) == -1
        assert await _position(b) == 1
        await asyncio.sleep(0.35)
        assert await _position(a) == 2


def _cookie_value(client: httpx.AsyncClient, room: str = "sale") -> str:
    return str(client.cookies[f"qg_{room}"])


async def test_bad_cookies_make_a_new_visitor_never_an_error(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale(rate=1), Room("other", paths=["/other*"], rate=5, per=60.0)])
    async with client_for(gate) as holder, client_for(gate) as other:
        await holder.get("/checkout")
        await other.get("/other")
        good = _cookie_value(holder)
        visitor, stamp, signature = good.split(".")
        forged_id = "A" * 16 + "." + stamp + "." + signature
        flipped = "B" if signature[5] == "A" else "A"
        old_signer = TimestampSigner(
            SECRET.encode(), salt="queuegate.room.sale", digest_method=hashlib.sha256
        )
        old_signer.get_timestamp = lambda: int(time.time()) - 2 * 86400  # type: ignore[method-assign]
        expired = old_signer.sign(visitor).decode()
        bad = {
            # A character inside the signature (the last one may carry only
            # padding bits, which base64 decoding ignores).
            "tampered": f"{visitor}.{stamp}.{signature[:5]}{flipped}{signature[6:]}",
            "truncated": good[: len(good) // 2],
            "forged id": forged_id,
            "other room": _cookie_value(other, "other"),
            "expired": expired,
            "garbage": "%%%\x00;;==",
            "empty": "",
        }
        for name, value in bad.items():
            response = await holder.get(
                "/checkout", headers={"cookie": f"qg_sale={value}", "accept": "application/json"}
            )
            assert response.status_code == 503, name  # a new visitor waits
            new_cookie = response.headers["set-cookie"]
            assert not new_cookie.startswith(f"qg_sale={visitor}."), name


async def test_rotated_key_still_verifies_and_newest_signs(make_gate: MakeGate) -> None:
    old_key, new_key = SECRET, "a-brand-new-secret-key-987654321"
    before = await make_gate(rooms=[sale()], secret_key=old_key)
    async with client_for(before) as client:
        await client.get("/checkout")
        cookie = _cookie_value(client)
    after = await make_gate(rooms=[sale()], secret_key=[new_key, old_key])
    retired = await make_gate(rooms=[sale()], secret_key=[new_key])
    async with client_for(after) as client:
        response = await client.get("/checkout", headers={"cookie": f"qg_sale={cookie}"})
        assert response.status_code == 200  # still the admitted visitor
        newcomer = await client_for(after).get("/checkout")
        signer = TimestampSigner(new_key.encode(), salt="queuegate.room.sale", digest_method=hashlib.sha256)
        assert signer.validate(newcomer.cookies["qg_sale"])
    async with client_for(retired) as client:
        response = await client.get("/checkout", headers={"cookie": f"qg_sale={cookie}"})
        assert response.status_code == 503


async def test_hostile_title_is_escaped(make_gate: MakeGate) -> None:
    title = '<script>alert("x")</script>&'
    gate = await make_gate(rooms=[sale(title=title)])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        body = (await second.get("/checkout")).text
    assert title not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in body


async def test_status_endpoint(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as first, client_for(gate) as second:
        assert (await second.get("/_queuegate/status/sale")).json()["state"] == "none"
        await first.get("/checkout")
        await second.get("/checkout")
        waiting = await second.get("/_queuegate/status/sale")
        assert waiting.status_code == 200
        assert (waiting.json()["state"], waiting.json()["position"]) == ("waiting", 1)
        active = await first.get("/_queuegate/status/sale")
        assert active.json()["state"] == "active"
        assert active.json()["expires_in_seconds"] > 0
        assert (await first.get("/_queuegate/status/nope")).status_code == 404
        assert (await first.post("/_queuegate/status/sale")).status_code == 405
        assert (await first.get("/_queuegate/leave/sale")).status_code == 405


async def test_status_poll_does_not_join(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        await second.get("/checkout")
        await second.post("/_queuegate/leave/sale")
        # A stale page polling after leaving learns it has no place.
        stale = await second.get(
            "/_queuegate/status/sale", headers={"cookie": f"qg_sale={_cookie_value(first)}x"}
        )
        assert stale.json()["state"] == "none"
        assert int((await gate.rooms["sale"].stats())["waiting"]) == 0


@pytest.mark.parametrize(
    ("method", "route"),
    [
        ("GET", "/_queuegate/status/sale/"),
        ("GET", "/_queuegate/status/"),
        ("GET", "/_queuegate/status/sale/more"),
        ("GET", "/_queuegate/status/sa%20le"),
        ("GET", "/_queuegate/stream/sale/"),
        ("POST", "/_queuegate/leave/sale/"),
        ("POST", "/_queuegate/join/sale/"),
    ],
)
async def test_an_endpoint_in_another_form_is_no_room_and_takes_no_place(
    make_gate: MakeGate, method: str, route: str
) -> None:
    # A room covering every path: a form the endpoints do not take, given
    # to the app, was a request to a gated page, and a newcomer's join.
    gate = await make_gate(rooms=[Room("sale", paths=["/*"], rate=1, per=60.0)])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        answer = await second.request(method, route, headers={"accept": "application/json"})
        assert answer.status_code == 404, route
        assert answer.json()["state"] == "not_found"
        assert "qg_sale" not in answer.cookies
    assert int((await gate.rooms["sale"].stats())["waiting"]) == 0


@pytest.mark.parametrize(
    "path",
    [
        "/checkout",
        "/Checkout",
        "/CHECKOUT/",
        "//checkout",
        "/a/../checkout",
        "/./checkout",
        "/%63heckout",
        "/%2563heckout",
        "/checkout;jsessionid=1",
        "/\uff43heckout",
        "/checkout/pay",
    ],
)
async def test_path_variants_are_gated(make_gate: MakeGate, path: str) -> None:
    gate = await make_gate(rooms=[sale(rate=1)])
    async with client_for(gate) as first:
        await first.get("/checkout")
    # Hand the gate the path as a server would, after its own decoding.
    assert await asgi_status(gate, path) == 503, path


async def asgi_status(app: QueueGate, path: str) -> int:
    """Call the app with a raw scope; return the response status."""
    status, _, _ = await call_asgi(app, http_scope(path))
    return status


async def test_open_methods_pass_a_room_and_every_other_method_waits(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale(rate=1, open_methods=["GET", "OPTIONS"])])
    async with client_for(gate) as a, client_for(gate) as b:
        assert (await a.post("/checkout")).status_code == 200
        assert (await b.post("/checkout")).status_code == 503
        assert (await b.get("/checkout")).status_code == 200
        assert (await b.options("/checkout")).status_code == 200
        for method in ("PUT", "DELETE", "PATCH", "HEAD", "PROPFIND"):
            assert (await b.request(method, "/checkout")).status_code == 503, method


async def test_works_as_starlette_middleware_and_release_from_the_app(redis_url: str) -> None:
    async def buy(request: Request) -> PlainTextResponse:
        ticket = admission(request)
        assert ticket is not None
        assert ticket.room == "sale"
        released = await ticket.release()
        return PlainTextResponse(f"order placed, released={released}")

    app = Starlette(
        routes=[Route("/checkout", buy, methods=["POST"])],
        middleware=[
            Middleware(QueueGate, rooms=[sale(rate=1)], secret_key=SECRET, redis=redis_url, environ={})
        ],
    )
    async with client_for(app) as a, client_for(app) as b:
        assert (await b.get("/_queuegate/status/sale")).json()["state"] == "none"
        assert (await a.post("/checkout")).text == "order placed, released=True"
        # The slot is free again but the bucket is spent: b waits its turn.
        assert (await b.post("/checkout")).status_code == 503
        # a's slot is gone: coming back means the back of the line.
        assert (await a.post("/checkout", headers={"accept": "application/json"})).json()["position"] == 2
    # The lifespan was not run here; close the gate's client by hand.
    stack: object = app.middleware_stack
    while not isinstance(stack, QueueGate):
        stack = stack.app  # type: ignore[attr-defined]
    await stack.store.aclose()


async def test_closed_room_page(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale()])
    await gate.rooms["sale"].configure(status="closed")
    async with client_for(gate) as client:
        response = await client.get("/checkout")
        assert response.status_code == 503
        assert "This line is closed" in response.text
        data = (await client.get("/checkout", headers={"accept": "application/json"})).json()
        assert data["state"] == "closed"
        assert "in_line" not in data


async def test_a_room_closed_tells_those_in_line_their_place_is_kept(make_gate: MakeGate) -> None:
    """Closed while people wait: their place is kept (the room may open
    again), and the page that shows it retries by itself. It told them,
    as it tells newcomers, that nobody new can join and to come back
    later (an operator's trial: they would have left). Opened again, the
    same visitor is back at the same place."""
    gate = await make_gate(rooms=[sale(rate=1, per=3600, abandon=0)])  # 0: nobody dropped as gone
    json_ = {"accept": "application/json"}
    async with client_for(gate) as first, client_for(gate) as waiting, client_for(gate) as newcomer:
        assert (await first.get("/checkout")).status_code == 200
        assert (await waiting.get("/checkout", headers=json_)).json()["position"] == 1
        await gate.rooms["sale"].configure(status="closed")
        page = await waiting.get("/checkout")
        assert page.status_code == 503
        assert "This line is closed for now" in page.text
        assert "Your place is kept." in page.text
        assert "come back later" not in page.text
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["state"], said["in_line"], said["retry_after_seconds"]) == ("closed", True, 60)
        assert "come back later" in (await newcomer.get("/checkout")).text
        await gate.rooms["sale"].configure(status="open")
        assert (await waiting.get("/checkout", headers=json_)).json()["position"] == 1


async def test_a_paused_line_tells_those_waiting_it_is_paused(make_gate: MakeGate) -> None:
    """Paused, a line holds everybody: the page said only that the wait was
    "unknown for now" beside a place that no longer moved (an operator's
    trial: people would take it for broken). It says the line is paused
    and the place kept, in the page and the JSON, until it opens again."""
    gate = await make_gate(rooms=[sale(rate=1, per=3600)])
    json_ = {"accept": "application/json"}
    async with client_for(gate) as first, client_for(gate) as waiting:
        assert (await first.get("/checkout")).status_code == 200
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["paused"], said["eta_text"]) == (False, "about 60 minutes")
        await gate.rooms["sale"].configure(status="paused")
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["position"], said["paused"], said["eta_seconds"]) == (1, True, None)
        assert said["eta_text"] == "paused for now; your place is kept"
        page = await waiting.get("/checkout", headers={"accept-language": "he"})
        assert 'id="qg-eta">מושהה כרגע; המקום שלכם שמור<' in page.text
        assert '<main id="qg" class="paused"' in page.text  # its dots stand still
        assert 'data-paused="התור מושהה"' in page.text
        assert ">התור מושהה</h1>" in page.text  # its heading says it
        assert "<title>התור מושהה</title>" in page.text  # and its tab, where most visitors wait
        await gate.rooms["sale"].configure(status="open")
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["position"], said["paused"], said["eta_text"]) == (1, False, "about 60 minutes")
        page = await waiting.get("/checkout")
        assert '<main id="qg" class=""' in page.text, page.text[page.text.find("<main") :][:120]
        assert 'data-paused="The line is paused"' in page.text
        assert ">You are in line</h1>" in page.text
        assert "<title>You are in line</title>" in page.text


async def test_one_who_lost_a_place_and_joins_again_is_told(make_gate: MakeGate) -> None:
    """A drained line, a removal, a skip as gone: the page came back with a
    new place at the end and not a word (a runbook's trial: place 5 became
    place 40, unexplained). The answer that gives the new place says why;
    a newcomer's first answer, and the polls after, do not."""
    gate = await make_gate(rooms=[sale(rate=1, per=3600)])
    json_ = {"accept": "application/json"}
    async with client_for(gate) as first, client_for(gate) as waiting, client_for(gate) as newcomer:
        assert (await first.get("/checkout")).status_code == 200
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["position"], said["rejoined"]) == (1, False)
        assert (await waiting.get("/checkout", headers=json_)).json()["rejoined"] is False  # kept
        assert await gate.rooms["sale"].drain() == 1
        assert (await newcomer.get("/checkout", headers=json_)).json()["rejoined"] is False
        page = await waiting.get("/checkout")
        assert "You lost your earlier place in line" in page.text
        said = (await waiting.get("/checkout", headers=json_)).json()
        assert (said["position"], said["rejoined"]) == (2, False)  # (the page came back at the end)
        assert await gate.rooms["sale"].leave(waiting.cookies["qg_sale"].split(".")[0].split("~")[0])
        said = (await waiting.get("/checkout", headers={**json_, "accept-language": "ko"})).json()
        assert (said["position"], said["rejoined"]) == (2, True)


async def test_a_place_kept_through_a_closing_longer_than_abandon_is_still_there(make_gate: MakeGate) -> None:
    """A visitor told the place is kept, whose page asks again on its own
    while the room is closed, is present: reopened after longer than
    `abandon`, it is their turn, not a skip (the closed page's asks did
    not count, and the head dropped them as gone)."""
    gate = await make_gate(rooms=[sale(rate=1, per=2.0, abandon=3.0)])  # (the shortest there is)
    json_ = {"accept": "application/json"}
    async with client_for(gate) as first, client_for(gate) as waiting:
        assert (await first.get("/checkout")).status_code == 200
        assert (await waiting.get("/checkout", headers=json_)).json()["position"] == 1
        await gate.rooms["sale"].configure(status="closed")
        for _ in range(4):  # 4 s, over `abandon`, asking again when told (within `abandon`)
            said = (await waiting.get("/checkout", headers=json_)).json()
            assert (said["state"], said["in_line"], said["retry_after_seconds"]) == ("closed", True, 1)
            await asyncio.sleep(said["retry_after_seconds"])
        await gate.rooms["sale"].configure(status="open")  # a refill came meanwhile: their turn
        stats = await gate.store.stats("sale")
        assert (stats["abandoned"], stats["active"], stats["waiting"]) == (0, 2, 0)
        assert (await waiting.get("/checkout")).status_code == 200


async def test_prequeue_page_before_a_scheduled_opening(make_gate: MakeGate) -> None:
    import base64

    from queuegate.fairness import seed_commitment

    gate = await make_gate(rooms=[sale(rate=5, opens_at=time.time() + 120)])
    async with client_for(gate) as client:
        data = (await client.get("/checkout", headers={"accept": "application/json"})).json()
        assert data["state"] == "prequeue"
        assert 110 <= data["opens_in_seconds"] <= 120
        seed = await gate.rooms["sale"].seed()
        assert seed is not None
        assert data["seed_sha256"] == seed_commitment(seed)
        page = await client.get("/checkout")
        assert page.status_code == 503
        assert "Opening soon" in page.text
        assert seed_commitment(seed) in page.text
        assert seed not in page.text
        script = re.search(r"<script>(.*?)</script>", page.text, re.S)
        assert script is not None
        digest = base64.b64encode(hashlib.sha256(script[1].encode()).digest()).decode()
        assert f"'sha256-{digest}'" in page.headers["content-security-policy"]
        status = await client.get("/_queuegate/status/sale")
        assert status.json()["state"] == "prequeue"


async def test_lottery_room_shows_the_draw_not_a_place(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[sale(rate=1, method="random")])
    async with client_for(gate) as a, client_for(gate) as b, client_for(gate) as c:
        await a.get("/checkout")
        await b.get("/checkout")
        data = (await c.get("/checkout", headers={"accept": "application/json"})).json()
        assert (data["method"], data["position"], data["ahead"], data["line"]) == ("random", None, None, 2)
        page = await c.get("/checkout")
        assert "people in the draw" in page.text


async def test_the_page_after_leaving_has_a_way_back_in_the_visitors_language(make_gate: MakeGate) -> None:
    """The page that says "You left the line" used to be a dead end: it links to the site's
    home page (under the app's root path), in the visitor's language."""
    gate = await make_gate(rooms=[sale(rate=1, per=60.0)])
    async with client_for(gate) as first, client_for(gate) as second:
        await first.get("/checkout")
        await second.get("/checkout", headers={"accept-language": "de"})
        left = await second.post("/_queuegate/leave/sale", headers={"accept-language": "de"})
        assert left.status_code == 200
        assert '<p class="back"><a href="/">Zurück zur Startseite</a></p>' in left.text
        scope = {**http_scope("/shop/_queuegate/leave/sale", method="POST"), "root_path": "/shop"}
        _, _, body = await call_asgi(gate, scope)
        assert '<a href="/shop/">' in body.decode()
        json_left = await first.post("/_queuegate/leave/sale", headers={"accept": "application/json"})
        assert json_left.json()["state"] == "left"


async def test_the_rooms_of_the_code_are_known_in_redis_once_the_app_has_started(
    make_gate: MakeGate, redis_url: str
) -> None:
    """Before the launch, the operator pauses the room or sets its rate from
    the console, a Store or the back office: those name the room, and
    refused it ("no room named 'sale' has been used yet") until a first
    visitor came. The gate's startup makes each room of the code known;
    a template makes no room until a value calls for it."""
    from queuegate.store import Store, connect

    rooms = [Room("sale", paths=["/checkout"], rate=5), Room("event-{id}", paths=["/e/{id}"], rate=5)]
    gate = await make_gate(lifespan_app, rooms=rooms, prefix="qg-known-at-start")
    operator = Store(connect(redis_url, 2.0), prefix=gate.store.prefix)  # the console's, in another process
    try:
        async with running(gate):
            assert await operator.room_names() == ["sale"]
            await operator.configure("sale", status="paused", rate=7)
            async with client_for(gate) as client:
                assert (await client.get("/checkout")).status_code == 503  # paused before anyone came
            assert (await operator.stats("sale"))["rate"] == 7
    finally:
        await operator.aclose()
