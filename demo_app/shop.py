"""The demo shop: a landing page, a gated checkout and a limited stock in Redis."""

from __future__ import annotations

import html
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from queuegate import QueueGate, Room, admission

STOCK = 100
RATE, PER = 2, 10.0

# DECR is atomic: two checkouts can never both take the last item.
TAKE_ONE = """
local left = redis.call('DECR', KEYS[1])
if left < 0 then redis.call('INCR', KEYS[1]) return -1 end
return left
"""

STYLE = """
:root { color-scheme: light dark; --accent: #2457d6; }
body { margin: 0; font: 16px/1.5 system-ui, sans-serif; background: Canvas; color: CanvasText; }
main { max-width: 34rem; margin: 3rem auto; padding: 0 1rem; }
.card { border: 1px solid color-mix(in srgb, CanvasText 15%, transparent); border-radius: 1rem;
  padding: 1.5rem; }
.price { font-size: 1.6rem; font-weight: 700; }
.muted { color: #667085; }
a.button, button { display: inline-block; font: inherit; font-weight: 600; padding: .7rem 1.2rem;
  border-radius: .6rem; border: 0; background: var(--accent); color: white; text-decoration: none;
  cursor: pointer; }
"""


def page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )


def create_app(
    redis_url: str,
    *,
    secret_key: str | None = None,
    stock: int = STOCK,
    rate: int = RATE,
    per: float = PER,
) -> Starlette:
    db = aioredis.Redis.from_url(redis_url)
    take_one = db.register_script(TAKE_ONE)
    stock_key = "demo:stock"

    async def stock_left() -> int:
        value = await db.get(stock_key)
        return int(value) if value is not None else stock

    async def home(request: Request) -> Response:
        left = await stock_left()
        return page(
            "Flash sale",
            f"<h1>Flash sale</h1><div class='card'><h2>Limited sneakers</h2>"
            f"<p class='price'>€49</p><p class='muted'>{left} of {stock} left. "
            f"The checkout lets {rate} people in every {per:g} seconds; "
            "everyone else waits in a fair line.</p>"
            f"<a class='button' href='/checkout'>Buy now</a></div>",
        )

    async def checkout(request: Request) -> Response:
        left = await stock_left()
        return page(
            "Checkout",
            "<h1>Checkout</h1><div class='card'><p>It is your turn. One pair of limited sneakers, €49.</p>"
            f"<p class='muted'>{left} left.</p>"
            "<form method='post' action='/checkout/buy'>"
            "<button type='submit'>Place order</button></form></div>",
        )

    async def buy(request: Request) -> Response:
        left = int(await take_one(keys=[stock_key]))
        ticket = admission(request)
        if ticket is not None:
            await ticket.release()  # the order is placed: the next visitor may enter at once
        if left < 0:
            return page("Sold out", "<h1>Sold out</h1><p>Sorry, the last pair just went.</p>")
        return page(
            "Order placed",
            f"<h1>Order placed</h1><div class='card'><p>Thank you! {left} left.</p>"
            "<a class='button' href='/'>Back to the shop</a></div>",
        )

    async def reset(request: Request) -> Response:
        await db.set(stock_key, stock)
        return RedirectResponse("/", status_code=303)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.set(stock_key, stock, nx=True)
        yield
        await db.aclose()

    room = Room("checkout", title="Limited sneakers checkout", paths=["/checkout*"], rate=rate, per=per)
    return Starlette(
        routes=[
            Route("/", home),
            Route("/checkout", checkout),
            Route("/checkout/buy", buy, methods=["POST"]),
            Route("/reset", reset, methods=["POST"]),
        ],
        middleware=[
            Middleware(
                QueueGate,
                rooms=[room],
                secret_key=secret_key or secrets.token_urlsafe(32),
                redis=redis_url,
                cookie_secure=False,  # the demo serves plain http on localhost
            )
        ],
        lifespan=lifespan,
    )
