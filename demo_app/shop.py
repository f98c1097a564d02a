"""The demo shop: a flash sale whose checkout and ticket sales sit behind rooms.

- ``/``: the landing page with a countdown and the product (not gated);
- ``/checkout``: gated by a rate room; buying takes one item from a limited
  stock kept in Redis and releases the visitor's slot;
- ``/tickets``: events, each with its own line (a template room);
- ``/admin``: queuegate's back office, and ``/shop-admin`` the shop's own
  controls (see admin.py).
"""

from __future__ import annotations

import asyncio
import html
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from queuegate import Health, QueueGate, Room, Store, admission
from queuegate.store import StoreError, UnknownRoom

from .admin import ShopControls

STOCK = 100
RATE, PER = 2, 10.0
EVENTS = {"jazz-night": "Jazz night", "rock-arena": "Rock in the arena", "opera-gala": "Opera gala"}
SALE_MINUTES = 60.0
# What the landing page says of a checkout that is not open (docs/guides/rooms.md).
NOT_OPEN = {
    "paused": "The checkout lets nobody new in at the moment; everyone waits in a fair line.",
    "closed": "The checkout is closed at the moment.",
    "queue_all": "Everyone passes through a fair line at the moment, even with room free.",
    "passthrough": "Everyone goes straight to the checkout at the moment.",
}
# A visitor silent this long (closed the tab) loses their place: short, so
# that the demo's drop-off shows within a minute or two (the default is 300 s).
ABANDON = 60.0
# The rooms' titles in the visitor's language (English where not given).
CHECKOUT_TITLE = {
    "en": "Limited sneakers checkout",
    "de": "Kasse: limitierte Sneaker",
    "fr": "Caisse : baskets en édition limitée",
    "es": "Pago: zapatillas de edición limitada",
    "ko": "한정판 스니커즈 결제",
    "ja": "限定スニーカーのお会計",
    "zh_Hans": "限量球鞋结账",
    "ar": "الدفع: أحذية رياضية بإصدار محدود",
}

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
  padding: 1.5rem; margin-bottom: 1rem; }
.price { font-size: 1.6rem; font-weight: 700; }
.muted { color: #667085; }
.countdown { font-size: 2rem; font-weight: 700; font-variant-numeric: tabular-nums; }
a.button, button { display: inline-block; font: inherit; font-weight: 600; padding: .7rem 1.2rem;
  border-radius: .6rem; border: 0; background: var(--accent); color: white; text-decoration: none;
  cursor: pointer; }
nav a { margin-right: 1rem; }
"""


ENDED = (
    "<h1>The sale has ended</h1><div class='card'><p>Thank you for coming. "
    "<a href='/tickets'>Tickets</a> are still on sale.</p></div>"
)


def page(title: str, body: str, script: str = "") -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main><nav><a href='/'>Shop</a><a href='/tickets'>Tickets</a></nav>{body}</main>"
        f"{script}</body></html>"
    )


def create_app(
    redis_url: str,
    *,
    secret_key: str | None = None,
    stock: int = STOCK,
    rate: int = RATE,
    per: float = PER,
    challenge: int = 0,
    target_ms: int = 0,
    admin_token: str | None = None,
    base_url: str | None = None,
    sale_minutes: float = SALE_MINUTES,
) -> ASGIApp:
    """The shop, gated. ``base_url`` (where it is served) lets the back office
    send virtual visitors to it. The sale ends ``sale_minutes`` after the
    start, when the countdown shows 0:00: the checkout says so from then on."""
    db = aioredis.Redis.from_url(redis_url)
    take_one = db.register_script(TAKE_ONE)
    stock_key = "demo:stock"
    sale_ends = time.time() + sale_minutes * 60

    async def stock_left() -> int:
        value = await db.get(stock_key)
        return int(value) if value is not None else stock

    async def stock_said() -> str:
        """The pairs left, as the landing page says it: the page is not
        gated, and stays up when Redis does not answer."""
        try:
            return f"{await stock_left()} of {stock}"
        except (aioredis.RedisError, OSError):
            return f"Up to {stock}"

    async def restock() -> None:
        await db.set(stock_key, stock)

    store = Store(db)

    async def how_the_line_moves() -> str:
        """The checkout's pace as the room has it now: the back office or the
        console may have changed it since the start."""
        line = "; everyone else waits in a fair line."
        try:
            room = await store.stats("checkout")
        except (StoreError, UnknownRoom):
            return "The checkout lets people in a few at a time" + line
        rate, per, capacity = int(room["rate"]), int(room["per"]) / 1000, int(room["capacity"])
        if room["status"] in NOT_OPEN:
            return NOT_OPEN[room["status"]]
        if rate > 0:
            pace = f"The checkout lets {rate} {'person' if rate == 1 else 'people'} in every {per:g} seconds"
            if int(room["target_ms"]) > 0:
                pace += " for now (the pace follows how fast the checkout answers)"
            return pace + line
        if capacity > 0:
            people = "person" if capacity == 1 else "people"
            return f"The checkout lets {capacity} {people} in at a time" + line
        return "The checkout lets everyone in."

    async def home(request: Request) -> Response:
        left = await stock_said()
        ends_in = max(0, int(sale_ends - time.time()))
        if not ends_in:
            return page("Flash sale", ENDED)
        return page(
            "Flash sale",
            f"<h1>Flash sale</h1><div class='card' id='sale'><p class='muted'>The sale ends in</p>"
            f"<p class='countdown' id='countdown' data-left='{ends_in}'>"
            f"{ends_in // 60}:{ends_in % 60:02d}</p>"
            f"<h2>Limited sneakers</h2><p class='price'>€49</p><p class='muted'>{left} left. "
            f"{await how_the_line_moves()} Leave the line, or be silent for "
            f"{ABANDON:g} seconds (a closed tab), and your place goes to the next.</p>"
            "<a class='button' href='/checkout'>Buy now</a></div>",
            # At 0:00 the sale is over here too: the checkout says so from then on.
            "<script>(function(){var e=document.getElementById('countdown'),t=Date.now()+"
            "1000*Number(e.getAttribute('data-left'));var i=setInterval(function(){var s=Math.max(0,"
            "Math.round((t-Date.now())/1000));e.textContent=Math.floor(s/60)+':'+String(s%60)"
            ".padStart(2,'0');if(!s){clearInterval(i);location.reload();}},1000);})();</script>",
        )

    delay = {"ms": 0.0}  # the back office's switch: a slow checkout

    async def checkout(request: Request) -> Response:
        if time.time() >= sale_ends:
            return page("The sale has ended", ENDED)
        if delay["ms"]:
            await asyncio.sleep(delay["ms"] / 1000)
        left = await stock_left()
        return page(
            "Checkout",
            "<h1>Checkout</h1><div class='card'><p>It is your turn. One pair of limited sneakers, €49.</p>"
            f"<p class='muted'>{left} left.</p>"
            "<form method='post' action='/checkout/buy'>"
            "<button type='submit'>Place order</button></form></div>",
        )

    async def buy(request: Request) -> Response:
        ticket = admission(request)
        if time.time() >= sale_ends:
            if ticket is not None:
                await ticket.release()
            return page("The sale has ended", ENDED)
        left = int(await take_one(keys=[stock_key]))
        if ticket is not None:
            await ticket.release()  # the order is placed: the next visitor may enter at once
        if left < 0:
            return page("Sold out", "<h1>Sold out</h1><p>Sorry, the last pair just went.</p>")
        return page(
            "Order placed",
            f"<h1>Order placed</h1><div class='card'><p>Thank you! {left} left.</p>"
            "<a class='button' href='/'>Back to the shop</a></div>",
        )

    async def tickets(request: Request) -> Response:
        items = "".join(
            f"<div class='card'><h2>{html.escape(title)}</h2><p class='muted'>Its own line: 3 buyers at a "
            f"time.</p><a class='button' href='/tickets/{slug}/buy'>Get tickets</a></div>"
            for slug, title in EVENTS.items()
        )
        return page("Tickets", f"<h1>Tickets</h1>{items}")

    async def ticket(request: Request) -> Response:
        slug = request.path_params["event"]
        title = EVENTS[slug]  # the room's accept= let only these through
        if request.method == "POST":
            ticket = admission(request)
            if ticket is not None:
                await ticket.release()
            return page("Booked", f"<h1>Booked</h1><p>Enjoy {html.escape(title)}!</p>")
        return page(
            title,
            f"<h1>{html.escape(title)}</h1><div class='card'><p>It is your turn: choose your seats.</p>"
            "<form method='post'><button type='submit'>Book</button></form></div>",
        )

    rooms = [
        Room(
            "checkout",
            title=CHECKOUT_TITLE,
            paths=["/checkout", "/checkout/*"],
            rate=rate,
            per=per,
            challenge=challenge,
            # With a target, the rate follows the checkout's health (the back
            # office can slow the checkout down to show it).
            target=Health(p95_ms=target_ms, floor=1, ceiling=200) if target_ms else None,
            abandon=ABANDON,
        ),
        # An event not on sale is a 404 from the gate: no room, no line.
        Room(
            "ticket-{event}",
            # Each event's line bears its name (a name typed into a status
            # URL reaches the title too, unchecked by accept=).
            title=lambda values: EVENTS.get(values["event"], "Tickets"),
            paths=["/tickets/{event}/buy"],
            capacity=3,
            session=120,
            abandon=ABANDON,
            accept=lambda values: values["event"] in EVENTS,
        ),
    ]
    office = ShopControls(
        store, admin_token or secrets.token_urlsafe(16), base_url, stock_left, restock, stock, delay, rooms
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.set(stock_key, stock, nx=True)
        yield
        await office.aclose()
        await store.aclose()

    shop = Starlette(
        routes=[
            Route("/", home),
            Route("/checkout", checkout),
            Route("/checkout/buy", buy, methods=["POST"]),
            Route("/tickets", tickets),
            Route("/tickets/{event}/buy", ticket, methods=["GET", "POST"]),
            *office.routes(),
        ],
        lifespan=lifespan,
    )
    return QueueGate(
        shop,
        rooms=rooms,
        secret_key=secret_key or secrets.token_urlsafe(32),
        redis=redis_url,
        cookie_secure=False,  # the demo serves plain http on localhost
    )
