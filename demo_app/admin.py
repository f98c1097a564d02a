"""The demo's back office: queuegate's own (``queuegate.admin``), mounted at
``/admin`` behind the demo's token, and the shop's few controls of its own
(stock, and a switch that slows the checkout down) at ``/shop-admin``.

The token is the demo's auth, handed to the back office as its ``auth=``
hook, the way an app hands over its own login: ``/admin-login?token=...``
sets a cookie that the hook checks.
"""

from __future__ import annotations

import hmac
import html
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from queuegate import ConfigError, Room, Store, admin
from queuegate.admin.auth import same_origin
from queuegate.store import StoreError, UnknownRoom

COOKIE = "demo_admin"
PAGE = files(__package__).joinpath("admin.html").read_text(encoding="utf-8")
# Where a newcomer finds the token: every page that refuses says so.
SIGN_IN = (
    "Open the back office's address that python -m demo_app printed when it started: "
    "/admin-login?token=... on this site. The token is --admin-token, or "
    "$QUEUEGATE_DEMO_ADMIN_TOKEN, else a new random one at each start."
)


class ShopControls:
    def __init__(
        self,
        store: Store,
        token: str,
        base_url: str | None,
        stock: Callable[[], Awaitable[int]],
        restock: Callable[[], Awaitable[None]],
        stock_total: int,
        checkout_delay: dict[str, float] | None = None,
        rooms: Sequence[Room] = (),
    ) -> None:
        self.store = store
        self.token = token
        self.stock = stock
        self.restock = restock
        self.stock_total = stock_total
        # The checkout's extra time per request (ms): the switch that slows it
        # down, to watch an adaptive room follow.
        self.checkout_delay = checkout_delay if checkout_delay is not None else {"ms": 0.0}
        self.office = admin.app(
            store,
            auth=self.operator,
            visitors_url=base_url,
            links=[("Shop controls", "/shop-admin")],
            sign_in=SIGN_IN,
            rooms=rooms,  # their titles, beside their names
        )

    def operator(self, request: Request) -> str | None:
        """The back office's auth hook: the demo's token, from its cookie or
        as a bearer token."""
        offered = request.cookies.get(COOKIE) or request.headers.get("authorization", "").removeprefix(
            "Bearer "
        )
        if offered and hmac.compare_digest(offered.encode(), self.token.encode()):
            return "demo operator"
        return None

    async def login(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return _notice("Wrong admin token", 401)
        response = RedirectResponse("/admin/", 303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    def guarded(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded_handler(request: Request) -> Response:
            if self.operator(request) is None:
                return JSONResponse({"error": f"admin token required. {SIGN_IN}"}, 401)
            if request.method == "POST" and not same_origin(request):
                return JSONResponse({"error": "the change did not come from this site"}, 403)
            try:
                return await handler(request)
            except ConfigError as exc:
                return JSONResponse({"error": str(exc)}, 400)

        return guarded_handler

    async def page(self, request: Request) -> Response:
        if self.operator(request) is None:
            return _notice("Admin token required", 401)
        body = PAGE.replace("{{loop}}", html.escape(await self.what_slowing_shows()))
        return HTMLResponse(body, headers={"cache-control": "no-store"})

    async def what_slowing_shows(self) -> str:
        """The slow-checkout switch's effect on the checkout's room as it is:
        a rate that follows a health target, or a fixed one (the default)."""
        try:
            target = int((await self.store.stats("checkout"))["target_ms"])
        except (StoreError, UnknownRoom):
            target = 0
        if target > 0:
            return (
                f"The checkout's room keeps its p95 under {target} ms: slow the checkout past that and "
                "watch the room lower its rate in the back office (its health column, and the room's "
                "health chart); at 0 ms again the rate climbs back while people wait."
            )
        return (
            "The checkout's room has a fixed rate (no health target), so a slower checkout only makes "
            "each of its pages slower. To watch a rate follow the checkout's health, start the demo "
            "with --target-ms 300 (python -m demo_app --target-ms 300), then slow the checkout past "
            "300 ms here."
        )

    async def state(self, request: Request) -> Response:
        return JSONResponse(
            {
                "stock": await self.stock(),
                "stock_total": self.stock_total,
                "checkout_delay_ms": self.checkout_delay["ms"],
            }
        )

    async def slow_checkout(self, request: Request) -> Response:
        ms = (await _json(request)).get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= 10_000:
            raise ConfigError("ms must be a number of milliseconds from 0 to 10000")
        self.checkout_delay["ms"] = float(ms)
        return JSONResponse({"checkout_delay_ms": ms})

    async def restock_now(self, request: Request) -> Response:
        await self.restock()
        return JSONResponse({"stock": await self.stock()})

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/admin-login", self.login),
            Mount("/admin", self.office),
            Route("/shop-admin", self.page),
            Route("/shop-admin/api/state", self.guarded(self.state)),
            Route("/shop-admin/api/restock", self.guarded(self.restock_now), methods=["POST"]),
            Route("/shop-admin/api/slow", self.guarded(self.slow_checkout), methods=["POST"]),
        ]

    async def aclose(self) -> None:
        await self.office.state.office.aclose()


def _notice(title: str, status: int) -> HTMLResponse:
    """A refusal that says how to get in, styled as the back office."""
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}: queuegate demo</title><link rel='stylesheet' href='/admin/static/admin.css'>"
        f"</head><body><main class='login'><h1>{title}</h1><p>{html.escape(SIGN_IN)}</p></main>"
        "</body></html>",
        status,
    )


async def _json(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise ConfigError("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ConfigError("the body must be a JSON object")
    return data
