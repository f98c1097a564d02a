"""FastAPI behind queuegate: a room on a route (a dependency) and a room per
event by path patterns (the middleware alone).

Needs FastAPI and uvicorn: ``pip install -e ".[examples]"`` in the clone (not
from PyPI: that name there is not this project). Its keys
have a prefix of their own (``example-fastapi``, or $QUEUEGATE_PREFIX), so
it shares a Redis with the other examples and the demo without sharing
their rooms.

    export QUEUEGATE_REDIS_URL=redis://localhost:6379/0
    export QUEUEGATE_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    export QUEUEGATE_ADMIN_SECRET=choose-a-long-one    # the back office at /admin/
    uvicorn examples.fastapi_shop:create_app --factory --lifespan on
"""

from __future__ import annotations

import os

from fastapi import Depends, FastAPI

from queuegate import Admission, QueueGate, Room, admin
from queuegate.integrations.fastapi import queue


def create_app(admin_secret: str | None = None, **gate_options: object) -> QueueGate:
    app = FastAPI(title="A shop behind queuegate")

    @app.get("/")
    async def home() -> dict[str, str]:
        return {"shop": "open"}

    # Route-bound: the room sees exactly what this route serves.
    @app.post("/checkout")
    async def checkout(ticket: Admission | None = Depends(queue("sale"))) -> dict[str, str]:  # noqa: B008
        if ticket is not None:
            await ticket.release()  # the order is placed: the next visitor's turn
        return {"order": "placed"}

    @app.get("/checkout")
    async def checkout_page(ticket: Admission | None = Depends(queue("sale"))) -> dict[str, str]:  # noqa: B008
        return {"checkout": "your turn", "visitor": ticket.visitor if ticket else ""}

    # By path: every /tickets/<event>/buy... gets a line of its own.
    @app.get("/tickets/{event}/buy")
    async def buy(event: str) -> dict[str, str]:
        return {"event": event, "ticket": "yours"}

    rooms = [
        Room("sale", capacity=2, session=300),
        Room("ticket-{event}", paths=["/tickets/{event}/buy*"], rate=5, per=10),
    ]
    # Settings not given here come from QUEUEGATE_* variables.
    options = {"prefix": os.environ.get("QUEUEGATE_PREFIX", "example-fastapi"), **gate_options}
    gate = QueueGate(app, rooms=rooms, **options)  # type: ignore[arg-type]
    # The back office, on the gate's store, behind a sign-in with one secret
    # (or auth=: your own sign-in). Without either it refuses everyone.
    secret = admin_secret or os.environ.get("QUEUEGATE_ADMIN_SECRET")
    app.mount("/admin", admin.app(gate.store, secret=secret))
    return gate
