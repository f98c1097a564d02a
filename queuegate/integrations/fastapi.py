"""Route-bound gating for FastAPI: a dependency.

    from queuegate.integrations.fastapi import queue

    @app.post("/checkout", dependencies=[Depends(queue("sale"))])
    async def checkout(): ...

    router = APIRouter(dependencies=[Depends(queue("sale"))])  # a whole router

The dependency returns the request's :class:`~queuegate.Admission`. A visitor
who may not pass gets the gate's answer (the waiting page or JSON): the
dependency raises an ``HTTPException`` whose response the ``QueueGate``
middleware replaces with that answer; on a websocket route the handshake is
refused (close code 1008).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException, WebSocketException
from starlette.requests import HTTPConnection

from ..decisions import Admission, admission
from ..gate import ANSWER_KEY, POLICY_VIOLATION, gate_of
from . import check_route

__all__ = ["queue"]

_NOT_COPIED = {b"content-type", b"content-length"}


def queue(room: str) -> Callable[[HTTPConnection], Awaitable[Admission | None]]:
    """A dependency that lets only admitted visitors of ``room`` through."""

    async def queuegate_room(connection: HTTPConnection) -> Admission | None:
        scope = connection.scope
        gate, _ = gate_of(scope)
        page = await check_route(gate, room, scope)
        if page is None:
            return admission(scope)
        if scope["type"] == "websocket":
            raise WebSocketException(code=POLICY_VIOLATION, reason="not admitted yet")
        scope[ANSWER_KEY] = (page, [])
        headers = {k.decode(): v.decode() for k, v in page.headers if k not in _NOT_COPIED}
        raise HTTPException(page.status, detail=page.body.decode("utf-8", "replace"), headers=headers)

    return queuegate_room
