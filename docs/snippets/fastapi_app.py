"""A FastAPI shop whose checkout has a waiting room: uvicorn fastapi_app:gate --lifespan on"""

import os
from typing import Annotated

from fastapi import Depends, FastAPI

from queuegate import Admission, QueueGate, Room
from queuegate.integrations.fastapi import queue

# The gate reads its secret key from QUEUEGATE_SECRET_KEY (16+ random characters, the same in
# every process) and, when it is missing, says so and how to make one as it is made.
REDIS_URL = os.environ.get("QUEUEGATE_REDIS_URL", "redis://localhost:6379/0")

app = FastAPI()
Ticket = Annotated[Admission | None, Depends(queue("sale"))]  # the room, on the routes themselves


@app.get("/checkout")
async def checkout(ticket: Ticket) -> dict[str, str]:
    return {"checkout": "your turn"}


@app.post("/checkout")
async def place_order(ticket: Ticket) -> dict[str, str]:
    if ticket is not None:
        await ticket.release()  # done: session over; with a capacity, the next turn comes at once
    return {"order": "placed"}


# Serve `gate`, not `app`: the gate holds the rooms and answers the waiting visitors.
gate = QueueGate(
    app,
    rooms=[Room("sale", rate=1, per=10)],  # no paths: the routes name the room
    redis=REDIS_URL,
)
