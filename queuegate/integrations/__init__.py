"""Route-bound gating: the gate runs after the app's router, on the routes
themselves, so it sees exactly what the endpoint will serve.

The ``QueueGate`` middleware stays in front of the app (it holds the rooms,
serves the waiting page's endpoints and adds new cookies to responses);
these put a room on a route:

- Starlette: ``queuegate.gated`` (``queuegate.integrations.starlette``), an
  ASGI wrapper or route middleware;
- FastAPI: ``Depends(queuegate.integrations.fastapi.queue("sale"))``;
- Django: ``@queuegate.integrations.django.gated("sale")`` on a view.

A room used only on routes is declared without paths: ``Room("sale",
rate=10, per=5)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..decisions import Admission
from ..gate import HEADERS_KEY, QueueGate
from ..health import MEASURED_KEY
from ..pages import Page
from ..settings import Room

__all__ = ["check_route", "route_room", "serve_route"]


def route_room(
    gate: QueueGate, name: str, scope: Scope, path_params: Mapping[str, Any] | None = None
) -> Room:
    """The room ``name`` for a request a router dispatched (a template's
    values come from the route's path parameters)."""
    # From now on the gate adds route-bound gating's headers to responses
    # (it does from the start when a room has no paths).
    gate.route_bound = True
    params = (scope.get("path_params") or {}) if path_params is None else path_params
    room = gate.rooms.for_route(name, params)
    if room is None:
        raise LookupError(f"queuegate: a route is gated by room {name!r}, but no room has that name")
    return room


def _checked_already(gate: QueueGate, room: Room, scope: Scope) -> bool:
    """The middleware gated this request for ``room`` already, or a bypass
    rule lets it pass."""
    found = scope.get("queuegate")
    return (isinstance(found, Admission) and found.room == room.name) or gate.bypassed(scope)


async def serve_route(
    gate: QueueGate, name: str, scope: Scope, receive: Receive, send: Send, app: ASGIApp
) -> None:
    """Gate a request that a router dispatched to ``app`` in room ``name``."""
    room = route_room(gate, name, scope)
    if _checked_already(gate, room, scope):
        await app(scope, receive, send)
    else:
        await gate.gate_request(room, scope, receive, send, app)


async def check_route(
    gate: QueueGate, name: str, scope: Scope, path_params: Mapping[str, Any] | None = None
) -> Page | None:
    """For integrations that cannot wrap the app's ASGI callable (FastAPI
    dependencies, Django views): ``None`` when the request may go on (a new
    cookie is added to the response by the middleware), else the gate's
    answer, with its headers added to the page's."""
    room = route_room(gate, name, scope, path_params)
    if _checked_already(gate, room, scope):
        return None
    page, headers = await gate.decisions.decide(room, scope, join=scope["type"] == "http")
    if page is None:
        if headers:
            scope[HEADERS_KEY] = [*scope.get(HEADERS_KEY, ()), *headers]
        if room.target is not None and room.target.signal == "room":
            # The middleware's measurement around the app counts it here.
            scope[MEASURED_KEY] = (*scope.get(MEASURED_KEY, ()), room)
        return None
    return Page(page.status, [*page.headers, *headers], page.body)
