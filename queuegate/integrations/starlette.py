"""Route-bound gating for Starlette (and anything that routes to ASGI apps).

As route middleware, which keeps the route's own methods::

    Route("/checkout", checkout, middleware=[Middleware(gated, room="sale")])
    WebSocketRoute("/checkout/ws", feed, middleware=[Middleware(gated, room="sale")])

or around an app::

    Mount("/checkout", app=gated(checkout_app, room="sale"))

A template room takes its values from the route's path parameters:
``Route("/tickets/{event}/buy", buy, middleware=[Middleware(gated,
room="ticket-{event}")])``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..gate import gate_of
from . import serve_route

__all__ = ["gated"]


class gated:  # lower case: used like a function, gated(app, room="sale")
    """Gate the ASGI app ``app`` in room ``room``: only admitted visitors
    reach it; others get the waiting page (http) or a refused handshake
    (websocket). (An endpoint function is gated with the route middleware
    form, which keeps the route's own handling of the function.)"""

    def __init__(self, app: ASGIApp, room: str) -> None:
        self.app = app
        self.room = room

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        gate, _ = gate_of(scope)
        await serve_route(gate, self.room, scope, receive, send, self.app)
