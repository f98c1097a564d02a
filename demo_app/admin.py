"""The demo's back office: live numbers, run-time controls, virtual visitors.

Everything here goes through queuegate's operator API (``Store``) on the same
Redis as the gate, as an operator's own tool would.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from queuegate import ConfigError, Store, StoreError
from queuegate.settings import ROOM_SETTINGS
from queuegate.simulate import Progress, simulate
from queuegate.store import UnknownRoom

COOKIE = "demo_admin"
PAGE = files(__package__).joinpath("admin.html").read_text(encoding="utf-8")
MAX_VIRTUAL_VISITORS = 5000


class BackOffice:
    def __init__(
        self,
        store: Store,
        token: str,
        base_url: str | None,
        stock: Callable[[], Awaitable[int]],
        restock: Callable[[], Awaitable[None]],
        stock_total: int,
        checkout_delay: dict[str, float] | None = None,
    ) -> None:
        self.store = store
        # The checkout's extra time per request (ms): the switch that slows it
        # down, to watch an adaptive room follow.
        self.checkout_delay = checkout_delay if checkout_delay is not None else {"ms": 0.0}
        self.token = token
        self.base_url = base_url
        self.stock = stock
        self.restock = restock
        self.stock_total = stock_total
        self.simulation: Progress | None = None
        self.simulation_task: asyncio.Task[Progress] | None = None

    def allowed(self, request: Request) -> bool:
        offered = request.cookies.get(COOKIE) or request.headers.get("authorization", "").removeprefix(
            "Bearer "
        )
        return bool(offered) and hmac.compare_digest(offered.encode(), self.token.encode())

    def guarded(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded_handler(request: Request) -> Response:
            if not self.allowed(request):
                return JSONResponse(
                    {"error": "admin token required: open the admin URL printed at start"}, 401
                )
            try:
                return await handler(request)
            except ConfigError as exc:
                return JSONResponse({"error": str(exc)}, 400)
            except UnknownRoom as exc:
                return JSONResponse({"error": str(exc)}, 404)
            except StoreError as exc:
                return JSONResponse({"error": f"Redis unavailable: {exc}"}, 503)

        return guarded_handler

    async def page(self, request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:
            if not hmac.compare_digest(token.encode(), self.token.encode()):
                return HTMLResponse("<h1>Wrong admin token</h1>", 401)
            response = RedirectResponse("/admin", 303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/admin")
            return response
        if not self.allowed(request):
            return HTMLResponse(
                "<h1>Admin token required</h1><p>Open the admin URL printed at start.</p>", 401
            )
        return HTMLResponse(PAGE, headers={"cache-control": "no-store"})

    async def stats(self, request: Request) -> Response:
        rooms = [{"room": name, **await self.store.stats(name)} for name in await self.store.room_names()]
        simulation = None
        if self.simulation is not None:
            running = self.simulation_task is not None and not self.simulation_task.done()
            simulation = {
                "running": running,
                "started": self.simulation.started,
                "waiting": self.simulation.waiting,
                **self.simulation.summary(),
            }
        return JSONResponse(
            {
                "now": int(time.time() * 1000),
                "rooms": rooms,
                "stock": await self.stock(),
                "stock_total": self.stock_total,
                "checkout_delay_ms": self.checkout_delay["ms"],
                "simulation": simulation,
            }
        )

    async def configure(self, request: Request) -> Response:
        name = request.path_params["room"]
        changes = await _json(request)
        allowed = {*ROOM_SETTINGS, "pinned"}  # every run-time setting; "pinned": None unpins
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise ConfigError(f"cannot set {', '.join(unknown)} here")
        await self.store.configure(name, **changes)
        return JSONResponse({"room": name, **await self.store.stats(name)})

    async def start_simulation(self, request: Request) -> Response:
        if self.base_url is None:
            return JSONResponse({"error": "virtual visitors need the demo served (python -m demo_app)"}, 409)
        if self.simulation_task is not None and not self.simulation_task.done():
            return JSONResponse({"error": "virtual visitors are already running"}, 409)
        options = await _json(request)
        visitors = options.get("visitors", 200)
        path = options.get("path", "/checkout")
        give_up = options.get("give_up", 0.3)
        if not isinstance(visitors, int) or not 1 <= visitors <= MAX_VIRTUAL_VISITORS:
            raise ConfigError(f"visitors must be a whole number from 1 to {MAX_VIRTUAL_VISITORS}")
        if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
            raise ConfigError("path must be a path on this shop, like /checkout")
        if not isinstance(give_up, (int, float)) or not 0 <= give_up <= 1:
            raise ConfigError("give_up must be between 0 and 1")
        self.simulation = Progress(visitors)
        self.simulation_task = asyncio.create_task(
            simulate(
                self.base_url + path,
                visitors,
                concurrency=min(visitors, 200),
                give_up=give_up,
                progress=self.simulation,
            )
        )
        return JSONResponse({"running": True, "visitors": visitors})

    async def slow_checkout(self, request: Request) -> Response:
        ms = (await _json(request)).get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= 10_000:
            raise ConfigError("ms must be a number of milliseconds from 0 to 10000")
        self.checkout_delay["ms"] = float(ms)
        return JSONResponse({"checkout_delay_ms": ms})

    async def restock_now(self, request: Request) -> Response:
        await self.restock()
        return JSONResponse({"stock": await self.stock()})

    def routes(self) -> list[Route]:
        return [
            Route("/admin", self.page),
            Route("/admin/api/stats", self.guarded(self.stats)),
            Route("/admin/api/rooms/{room}", self.guarded(self.configure), methods=["POST"]),
            Route("/admin/api/simulate", self.guarded(self.start_simulation), methods=["POST"]),
            Route("/admin/api/restock", self.guarded(self.restock_now), methods=["POST"]),
            Route("/admin/api/slow", self.guarded(self.slow_checkout), methods=["POST"]),
        ]

    async def aclose(self) -> None:
        if self.simulation_task is not None:
            self.simulation_task.cancel()


async def _json(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise ConfigError("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ConfigError("the body must be a JSON object")
    return data
