"""Route-bound gating for Django (served over ASGI behind ``QueueGate``).

    # asgi.py
    application = QueueGate(get_asgi_application(), rooms=[Room("sale", rate=10, per=5)], ...)

    # views.py
    from queuegate.integrations.django import gated

    @gated("sale")
    def checkout(request): ...

The view runs only for an admitted visitor; others get the gate's answer.
A template room takes its values from the URL's captured arguments
(``@gated("ticket-{event}")`` on ``path("tickets/<event>/buy", buy)``).
Sync and async views both work; the gate's call runs on the server's event
loop either way.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse

from ..gate import gate_of
from . import check_route

__all__ = ["gated"]


async def _answer(request: HttpRequest, room: str, kwargs: dict[str, Any]) -> HttpResponse | None:
    scope = getattr(request, "scope", None)
    if scope is None:
        raise RuntimeError("queuegate: gated views need Django's ASGI handler behind QueueGate")
    gate, _ = gate_of(scope)
    page = await check_route(gate, room, scope, path_params=kwargs)
    if page is None:
        return None
    response = HttpResponse(page.body, status=page.status)
    for name, value in page.headers:
        response.headers[name.decode()] = value.decode()
    return response


def gated(room: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Only admitted visitors of ``room`` reach the decorated view."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        if asyncio.iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                answer = await _answer(request, room, kwargs)
                return answer if answer is not None else await view(request, *args, **kwargs)

            return async_view

        @functools.wraps(view)
        def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            answer = async_to_sync(_answer)(request, room, kwargs)
            return answer if answer is not None else view(request, *args, **kwargs)

        return sync_view

    return decorator
