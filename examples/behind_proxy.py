"""A Starlette shop served under a prefix by a reverse proxy that strips it:
the public URL https://example.com/shop/checkout reaches the app as
/checkout, and uvicorn is told the prefix:

    uvicorn examples.behind_proxy:create_app --factory --lifespan on --root-path /shop \\
        --proxy-headers --forwarded-allow-ips 10.0.0.0/8

Room patterns are written as the app routes (``/checkout/*``, no prefix); the
waiting page's links carry the prefix, so they go back through the proxy.
With ``trusted_proxies`` the per-client limit counts the real client from
X-Forwarded-For.

Needs uvicorn: ``pip install -e ".[examples]"`` in the clone (not from PyPI:
that name there is not this project). Its keys have a prefix of their own
(``example-proxy``, or $QUEUEGATE_PREFIX).
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from queuegate import QueueGate, Room


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the shop")


async def checkout(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"checkout {request.path_params.get('step', '')}".strip())


def create_app(**gate_options: object) -> QueueGate:
    app = Starlette(
        routes=[Route("/", home), Route("/checkout", checkout), Route("/checkout/{step}", checkout)]
    )
    options: dict[str, object] = {
        "trusted_proxies": ["10.0.0.0/8", "127.0.0.1"],
        "prefix": os.environ.get("QUEUEGATE_PREFIX", "example-proxy"),
        **gate_options,
    }
    return QueueGate(app, rooms=[Room("sale", paths=["/checkout", "/checkout/*"], rate=1, per=30)], **options)  # type: ignore[arg-type]
