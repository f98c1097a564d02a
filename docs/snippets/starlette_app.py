"""A Starlette shop whose checkout has a waiting room: uvicorn starlette_app:app --lifespan on"""

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from queuegate import QueueGate, Room

# The gate reads its secret key from QUEUEGATE_SECRET_KEY (16+ random characters, the same in
# every process) and, when it is missing, says so and how to make one as it is made.
REDIS_URL = os.environ.get("QUEUEGATE_REDIS_URL", "redis://localhost:6379/0")


async def checkout(request: Request) -> PlainTextResponse:
    return PlainTextResponse("Your turn: checkout")


app = Starlette(routes=[Route("/checkout", checkout)])
app.add_middleware(
    QueueGate,
    # 1 visitor every 10 s: small, so that a window and a private window show the line.
    rooms=[Room("sale", paths=["/checkout", "/checkout/*"], rate=1, per=10)],
    redis=REDIS_URL,
)
