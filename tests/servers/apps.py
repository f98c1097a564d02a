"""The shop on Starlette, FastAPI and Django, gated by path patterns
(``mode="paths"``) or on the routes themselves (``mode="routes"``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from queuegate import QueueGate, Room, admission, gated

OPEN_METHODS = {"OPTIONS"}  # the room's open_methods: every other method is gated
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
SECRET = "test-secret-key-0123456789abcdef"


def oracle(scope: Any, method: str) -> str:
    if admission(scope) is not None:
        return "PROTECTED"
    return "UNGATED-METHOD" if method.upper() in OPEN_METHODS else "LEAK"


def room(mode: str) -> Room:
    paths = ["/checkout*"] if mode == "paths" else []
    return Room(
        "sale", paths=paths, rate=1, per=3600, session=3600, client_limit=0, open_methods=sorted(OPEN_METHODS)
    )


def gate(app: ASGIApp, mode: str, redis_url: str, prefix: str) -> QueueGate:
    return QueueGate(
        app,
        rooms=[room(mode)],
        secret_key=SECRET,
        redis=redis_url,
        prefix=prefix,
        cookie_secure=False,
        # Two dozen servers start at once on a small machine: these tests are
        # about routing, not about answering within 0.25 s of a slow Redis.
        timeout=2.0,
        environ={},
    )


# -- Starlette -----------------------------------------------------------------


async def _protected(request: Request) -> Response:
    return PlainTextResponse("checkout", headers={"x-oracle": oracle(request.scope, request.method)})


async def _open(request: Request) -> Response:
    return PlainTextResponse("open", headers={"x-oracle": "OPEN"})


async def _feed(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(oracle(websocket.scope, "GET"))
    await websocket.close()


def starlette_routes(mode: str) -> list[BaseRoute]:
    guard = [Middleware(gated, room="sale")] if mode == "routes" else None

    def protected(path: str, methods: list[str] | None = None) -> Route:
        return Route(path, _protected, methods=methods or ["GET", "POST"], middleware=guard)

    return [
        protected("/checkout"),
        protected("/checkout/{item}"),
        protected("/checkout/{item}/pay"),
        protected("/checkout-any/{rest:path}", ALL_METHODS),
        Mount("/checkout-m", routes=[protected("/{x}"), protected("/{x}/{rest:path}")], middleware=guard),
        WebSocketRoute("/checkout/ws", _feed, middleware=guard),
        Route("/", _open),
        Route("/{page}", _open, methods=ALL_METHODS),
        Route("/files/{rest:path}", _open, methods=ALL_METHODS),
    ]


def starlette_app(mode: str) -> Starlette:
    return Starlette(routes=starlette_routes(mode))


def mounted_app(mode: str, redis_url: str, prefix: str) -> Starlette:
    """The gate inside a sub-app mounted at /sub: it must gate /sub/checkout."""
    inner = gate(starlette_app(mode), mode, redis_url, prefix)
    return Starlette(routes=[Mount("/sub", app=inner), Route("/{page}", _open, methods=ALL_METHODS)])


# -- FastAPI -------------------------------------------------------------------


def fastapi_app(mode: str) -> ASGIApp:
    from fastapi import Depends, FastAPI

    from queuegate.integrations.fastapi import queue

    deps = [Depends(queue("sale"))] if mode == "routes" else []
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    async def protected(request: Request) -> Response:
        return await _protected(request)

    for path in ("/checkout", "/checkout/{item}", "/checkout/{item}/pay"):
        app.add_api_route(path, protected, methods=["GET", "POST"], dependencies=deps)
    app.add_api_route("/checkout-any/{rest:path}", protected, methods=ALL_METHODS, dependencies=deps)

    @app.websocket("/checkout/ws", dependencies=deps)
    async def feed(websocket: WebSocket) -> None:
        await _feed(websocket)

    async def open_page(request: Request) -> Response:
        return await _open(request)

    app.add_api_route("/", open_page, methods=["GET"])
    app.add_api_route("/{page}", open_page, methods=ALL_METHODS)
    app.add_api_route("/files/{rest:path}", open_page, methods=ALL_METHODS)
    return app


# -- Django --------------------------------------------------------------------


def django_app(mode: str) -> ASGIApp:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY=SECRET,
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF="tests.servers.django_urls",
            MIDDLEWARE=[],
            INSTALLED_APPS=[],
            QGDEV_MODE=mode,
        )
        django.setup()
    from django.core.asgi import get_asgi_application

    return get_asgi_application()  # type: ignore[no-any-return]


ROUTERS: dict[str, Callable[[str], ASGIApp]] = {
    "starlette": starlette_app,
    "fastapi": fastapi_app,
    "django": django_app,
}


def more_routers() -> dict[str, Callable[[], ASGIApp]]:
    from . import frameworks

    return {
        "quart": frameworks.quart_app,
        "litestar": frameworks.litestar_app,
        "falcon": frameworks.falcon_app,
        "sanic": frameworks.sanic_app,
        "blacksheep": frameworks.blacksheep_app,
        "flask": frameworks.flask_app,
    }


def with_bare_twin(gated: ASGIApp, bare: ASGIApp) -> ASGIApp:
    """The gated app, and the same router without the gate for a request
    with ``x-bare: 1``: what the router alone dispatches a target to, where
    the gate refused it."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan" and (b"x-bare", b"1") in scope["headers"]:
            await bare(scope, receive, send)
        else:
            await gated(scope, receive, send)

    return app


def build(router: str, mode: str, redis_url: str, prefix: str) -> ASGIApp:
    if router == "mounted":
        return mounted_app(mode, redis_url, prefix)
    routed = ROUTERS[router](mode) if router in ROUTERS else more_routers()[router]()
    gated_app = gate(routed, mode, redis_url, prefix)
    # On routes the gate is in the router: there is no bare router to ask.
    return with_bare_twin(gated_app, routed) if mode == "paths" else gated_app
