"""The shop on more routers users run in production: Quart, Litestar,
Falcon (ASGI), Sanic (ASGI mode), BlackSheep and Flask (WSGI, behind
asgiref's adapter, as a Flask shop puts an ASGI middleware in front), gated
by path patterns only (none of them has a route-level integration). Each
reads the request target its own way: Quart builds a URL of any path and
routes its URL path, Sanic parses ``raw_path`` as a URL, Litestar and Falcon
strip leading slashes, asgiref cuts the root path off the path as a string
prefix (not at a segment's end) and Werkzeug routes what is left with a
slash put in front.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp

from .apps import ALL_METHODS, oracle

PROTECTED_GET_POST = ("/checkout", "/checkout/{item}", "/checkout/{item}/pay")


def _rules(app: Any, protected: Any, open_page: Any) -> None:
    """The shop's routes on a Flask-style router (Quart's, Flask's)."""
    for i, path in enumerate(PROTECTED_GET_POST):
        rule = path.replace("{item}", "<item>")
        app.add_url_rule(rule, f"protected{i}", protected, methods=["GET", "POST"])
    app.add_url_rule("/checkout-any/<path:rest>", "any", protected, methods=ALL_METHODS)
    app.add_url_rule("/", "home", open_page)
    app.add_url_rule("/<page>", "page", open_page, methods=ALL_METHODS)
    app.add_url_rule("/files/<path:rest>", "files", open_page, methods=ALL_METHODS)


def quart_app() -> ASGIApp:
    from quart import Quart, Response, request, websocket

    app = Quart("shop")

    async def protected(**_: str) -> Response:
        return Response("checkout", headers={"x-oracle": oracle(request.scope, request.method)})

    async def open_page(**_: str) -> Response:
        return Response("open", headers={"x-oracle": "OPEN"})

    _rules(app, protected, open_page)

    @app.websocket("/checkout/ws")
    async def feed() -> None:
        await websocket.accept()
        await websocket.send(oracle(websocket.scope, "GET"))

    return app  # type: ignore[return-value]


def litestar_app() -> ASGIApp:
    from litestar import Litestar, Request, Response, WebSocket, route, websocket

    def protected(request: Request[Any, Any, Any]) -> Response[str]:
        return Response("checkout", headers={"x-oracle": oracle(request.scope, request.method)})

    def open_page() -> Response[str]:
        return Response("open", headers={"x-oracle": "OPEN"})

    every: Any = ALL_METHODS  # Litestar types its methods as literals

    handlers: list[Any] = [
        route(path, http_method=["GET", "POST"], sync_to_thread=False, name=f"p{i}")(protected)
        for i, path in enumerate(("/checkout", "/checkout/{item:str}", "/checkout/{item:str}/pay"))
    ]
    handlers += [
        route("/checkout-any/{rest:path}", http_method=every, sync_to_thread=False, name="any")(protected),
        route("/", http_method=["GET"], sync_to_thread=False, name="home")(open_page),
        route("/{page:str}", http_method=every, sync_to_thread=False, name="page")(open_page),
        route("/files/{rest:path}", http_method=every, sync_to_thread=False, name="files")(open_page),
    ]

    @websocket("/checkout/ws")
    async def feed(socket: WebSocket[Any, Any, Any]) -> None:
        await socket.accept()
        await socket.send_text(oracle(socket.scope, "GET"))
        await socket.close()

    # The annotations are strings (``from __future__``) naming local imports.
    names = {"Request": Request, "Response": Response, "WebSocket": WebSocket, "Any": Any}
    return Litestar([*handlers, feed], openapi_config=None, signature_namespace=names)  # type: ignore[return-value]


def falcon_app() -> ASGIApp:
    import falcon.asgi

    class Protected:
        async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, **_: str) -> None:
            resp.text = "checkout"
            resp.set_header("x-oracle", oracle(req.scope, req.method))

        on_post = on_get

    class Any_(Protected):
        on_put = on_delete = on_patch = on_options = on_head = Protected.on_get

    class Open:
        async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, **_: str) -> None:
            resp.text = "open"
            resp.set_header("x-oracle", "OPEN")

        on_post = on_put = on_delete = on_patch = on_options = on_head = on_get

        async def on_websocket(self, req: falcon.asgi.Request, ws: falcon.asgi.WebSocket, **_: str) -> None:
            await ws.close()

    class Feed:
        async def on_websocket(self, req: falcon.asgi.Request, ws: falcon.asgi.WebSocket) -> None:
            await ws.accept()
            await ws.send_text(oracle(req.scope, "GET"))
            await ws.close()

    app = falcon.asgi.App()
    for path in PROTECTED_GET_POST:
        app.add_route(path, Protected())
    app.add_route("/checkout-any/{rest:path}", Any_())
    app.add_route("/checkout/ws", Feed())
    app.add_route("/", Open())
    app.add_route("/{page}", Open())
    app.add_route("/files/{rest:path}", Open())
    return app  # type: ignore[return-value]


def sanic_app() -> ASGIApp:
    from sanic import Request, Sanic, Websocket, text
    from sanic.response import HTTPResponse

    app = Sanic("shop", configure_logging=False)

    async def protected(request: Request, **_: str) -> HTTPResponse:
        return text("checkout", headers={"x-oracle": oracle(request.scope, request.method)})

    async def open_page(request: Request, **_: str) -> HTTPResponse:
        return text("open", headers={"x-oracle": "OPEN"})

    for i, path in enumerate(PROTECTED_GET_POST):
        rule = path.replace("{item}", "<item>")
        app.add_route(protected, rule, methods=["GET", "POST"], name=f"p{i}")
    app.add_route(protected, "/checkout-any/<rest:path>", methods=ALL_METHODS, name="any")
    app.add_route(open_page, "/", name="home")
    app.add_route(open_page, "/<page>", methods=ALL_METHODS, name="page")
    app.add_route(open_page, "/files/<rest:path>", methods=ALL_METHODS, name="files")

    async def feed(request: Request, ws: Websocket) -> None:
        await ws.send(oracle(request.scope, "GET"))

    app.add_websocket_route(feed, "/checkout/ws", name="feed")
    return app


def blacksheep_app() -> ASGIApp:
    from blacksheep import Application, Request, Response, WebSocket
    from blacksheep.server.responses import text

    app = Application()

    async def protected(request: Request) -> Response:
        answer = text("checkout")
        answer.add_header(b"x-oracle", oracle(request.scope, request.method).encode())
        return answer

    async def open_page(request: Request) -> Response:
        answer = text("open")
        answer.add_header(b"x-oracle", b"OPEN")
        return answer

    # BlackSheep reads a handler's annotations to bind its parameters, and
    # this module's are strings (PEP 563) naming this function's imports.
    for handler in (protected, open_page):
        handler.__annotations__ = {"request": Request, "return": Response}

    for path in PROTECTED_GET_POST:
        app.router.add_get(path, protected)
        app.router.add_post(path, protected)
    for method in ALL_METHODS:
        app.router.add(method, "/checkout-any/*", protected)
        app.router.add(method, "/{page}", open_page)
        app.router.add(method, "/files/*", open_page)
    app.router.add_get("/", open_page)

    async def feed(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(oracle(websocket.scope, "GET"))

    feed.__annotations__ = {"websocket": WebSocket, "return": None}
    app.router.add_ws("/checkout/ws", feed)
    return app


# The ASGI scope of the request a Flask view runs for: asgiref runs the WSGI
# app in a thread with the caller's context, and its environ has no scope.
_SCOPE: ContextVar[Any] = ContextVar("scope")


def flask_app() -> ASGIApp:
    from asgiref.wsgi import WsgiToAsgi
    from flask import Flask, Response, request

    app = Flask("shop")

    def protected(**_: str) -> Response:
        return Response("checkout", headers={"x-oracle": oracle(_SCOPE.get(), request.method)})

    def open_page(**_: str) -> Response:
        return Response("open", headers={"x-oracle": "OPEN"})

    _rules(app, protected, open_page)
    wsgi = WsgiToAsgi(app)  # type: ignore[no-untyped-call]

    async def shop(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # asgiref's adapter takes HTTP only
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1000})
            return
        _SCOPE.set(scope)
        await wsgi(scope, receive, send)

    return shop
