"""Route-bound gating: a room put on the routes themselves (Starlette route
middleware, a FastAPI dependency, a Django decorator), so the gate runs after
the router. (tests/test_routers.py attacks it through real servers.)"""

from __future__ import annotations

import pytest
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from queuegate import Admission, QueueGate, Room, gated
from queuegate.integrations.fastapi import queue

from .conftest import MakeGate, client_for

pytestmark = pytest.mark.anyio


async def buy(request: Request) -> Response:
    return PlainTextResponse(f"bought {request.path_params['event']}")


async def test_a_template_room_on_a_route_takes_its_values_from_the_route(make_gate: MakeGate) -> None:
    app = Starlette(
        routes=[Route("/tickets/{event}/buy", buy, middleware=[Middleware(gated, room="ticket-{event}")])]
    )
    gate = await make_gate(app, rooms=[Room("ticket-{event}", rate=1, per=3600, client_limit=0)])
    async with client_for(gate) as a, client_for(gate) as b:
        assert (await a.get("/tickets/7/buy")).text == "bought 7"
        assert (await a.get("/tickets/7/buy")).text == "bought 7"  # the cookie came with the answer
        waiting = await b.get("/tickets/7/buy")
        assert waiting.status_code == 503
        assert "text/html" in waiting.headers["content-type"]
        assert (await b.get("/tickets/8/buy")).text == "bought 8"  # another event, another line
    assert sorted(await gate.store.room_names()) == ["ticket-7", "ticket-8"]


async def test_fastapi_dependency_answers_with_the_waiting_page_and_sets_cookies(make_gate: MakeGate) -> None:
    api = FastAPI()
    released: list[bool] = []

    @api.get("/checkout", response_class=HTMLResponse)
    async def checkout(ticket: Admission | None = Depends(queue("sale"))) -> HTMLResponse:  # noqa: B008
        return HTMLResponse(f"<p>pay, {ticket.visitor if ticket else 'nobody'}</p>")

    @api.post("/checkout/done")
    async def done(ticket: Admission | None = Depends(queue("sale"))) -> dict[str, bool]:  # noqa: B008
        released.append(ticket is not None and await ticket.release())
        return {"released": released[-1]}

    gate = await make_gate(api, rooms=[Room("sale", capacity=1, client_limit=0)])
    async with client_for(gate) as a, client_for(gate) as b:
        first = await a.get("/checkout")
        assert first.status_code == 200
        assert "qg_sale=" in first.headers["set-cookie"]  # returned a Response, still got its cookie
        assert (await a.get("/checkout")).status_code == 200
        page = await b.get("/checkout")
        assert page.status_code == 503
        assert "text/html" in page.headers["content-type"]
        assert "detail" not in page.text  # the gate's page, not FastAPI's error body
        assert page.headers["cache-control"] == "no-store"
        assert "qg_sale=" in page.headers["set-cookie"]  # b keeps its place
        as_json = await b.get("/checkout", headers={"accept": "application/json"})
        assert as_json.json()["state"] == "waiting"
        assert as_json.json()["position"] == 1
        assert (await a.post("/checkout/done")).json() == {"released": True}
        assert (await b.get("/checkout")).status_code == 200  # the released slot went to b


async def test_route_bound_gating_without_the_middleware_fails_loudly() -> None:
    app = Starlette(routes=[Route("/checkout", buy, middleware=[Middleware(gated, room="sale")])])
    async with client_for(app) as browser:
        with pytest.raises(RuntimeError, match=r"no QueueGate middleware .*serve the gate, not the app"):
            await browser.get("/checkout")


async def test_an_unknown_room_on_a_route_fails_loudly(make_gate: MakeGate) -> None:
    app = Starlette(routes=[Route("/checkout", buy, middleware=[Middleware(gated, room="sael")])])
    gate = await make_gate(app, rooms=[Room("sale", rate=1)])
    async with client_for(gate) as browser:
        with pytest.raises(LookupError, match="sael"):
            await browser.get("/checkout")


async def test_a_room_on_paths_and_routes_checks_a_request_once(make_gate: MakeGate) -> None:
    async def checkout(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/checkout", checkout, middleware=[Middleware(gated, room="sale")])])
    gate: QueueGate = await make_gate(app, rooms=[Room("sale", paths=["/checkout*"], rate=2, per=3600)])
    async with client_for(gate) as browser:
        answer = await browser.get("/checkout")
    assert answer.text == "ok"
    # Checked twice, a visitor without a cookie would take a second place
    # (a second token of the rate) and get a second cookie. Told by the room
    # and the answer, not by counting calls: a build compiled with mypyc
    # does not let a test replace the store's methods.
    cookies = [c for c in answer.headers.get_list("set-cookie") if c.startswith("qg_sale=")]
    assert len(cookies) == 1
    assert (await gate.store.stats("sale"))["admitted"] == 1


async def test_a_route_room_inside_a_path_room_still_answers_with_its_page(make_gate: MakeGate) -> None:
    api = FastAPI()

    @api.get("/shop/checkout", dependencies=[Depends(queue("checkout"))])
    async def checkout() -> HTMLResponse:
        return HTMLResponse("<p>pay</p>")

    rooms = [Room("shop", paths=["/shop*"], capacity=10), Room("checkout", capacity=1, client_limit=0)]
    gate = await make_gate(api, rooms=rooms)
    async with client_for(gate) as a, client_for(gate) as b:
        first = await a.get("/shop/checkout")
        assert first.status_code == 200
        assert "qg_checkout=" in ";".join(first.headers.get_list("set-cookie"))  # both rooms' cookies
        assert (await a.get("/shop/checkout")).status_code == 200
        page = await b.get("/shop/checkout")  # inside the shop, waiting for checkout
        assert page.status_code == 503
        assert "text/html" in page.headers["content-type"]
