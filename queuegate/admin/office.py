"""The back office as an ASGI app: every room's live numbers and its line
over the event, the run-time controls, visitors, drain, the lottery's seed,
and the activity log. Everything goes through ``Store`` on the gate's Redis,
so it runs in the app's own process or beside it (``queuegate serve-admin``).
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

from ..checks import ROOM_SETTINGS, ConfigError
from ..readings import each_room
from ..risks import RISKS_UNKNOWN, risks
from ..rooms import Rooms
from ..settings import Room
from ..stats import health_age_ms
from ..store import Store, StoreError, UnknownRoom
from ..target import verdict
from . import activity
from .auth import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_HOURS,
    Auth,
    Guard,
    csrf_ok,
    new_csrf_token,
    operator_name,
    same_origin,
)
from .virtual import VirtualVisitors

logger = logging.getLogger("queuegate")

PAGE = files(__package__).joinpath("templates", "index.html").read_text(encoding="utf-8")
LOGIN = files(__package__).joinpath("templates", "login.html").read_text(encoding="utf-8")
MAX_BODY = 16 * 1024
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SIGN_OUT = '<form method="post" action="logout"><button class="quiet" type="submit">Sign out</button></form>'
# The answer to a change made whose room could not be read after it: in
# the page's words (the console's "check it with show" is no command here).
NOT_READ_AFTER = f"{RISKS_UNKNOWN}: check its figures once they can be read again"
SETTABLE = {*ROOM_SETTINGS, "pinned"}  # every run-time setting; "pinned": None unpins
SIGN_IN = "Sign in through the app this back office is part of: the app decides who may use it."
NOTICE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    '<meta name="robots" content="noindex">'
    '<link rel="icon" href="data:,"><title>{title}: queuegate back office</title>'
    '<link rel="stylesheet" href="{root}static/admin.css"></head>'
    '<body><main class="login"><h1>{title}</h1><p>{text}</p></main></body></html>'
)

Handler = Callable[[Request, str], Awaitable[Response]]


class BackOffice:
    def __init__(
        self,
        store: Store,
        guard: Guard,
        visitors_url: str | None,
        links: Sequence[tuple[str, str]],
        sign_in: str = SIGN_IN,
        rooms: Sequence[Room] = (),
    ) -> None:
        self.store = store
        # The rooms of the code, when given: their titles (Redis has none).
        self.code_rooms = Rooms(rooms, store) if rooms else None
        self._untitled: set[str] = set()  # rooms whose title failed, logged once
        self.sign_in = sign_in
        self.guard = guard
        self.virtual = VirtualVisitors(visitors_url) if visitors_url else None
        self.links = list(links)

    # -- the door ---------------------------------------------------------

    def _root(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")) + "/"

    def api(self, handler: Handler, *, change: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if not self.guard.configured:
                return _error(NOT_CONFIGURED, 403)
            who = await self.guard.operator(request)
            if who is None:
                return _error("not signed in to the back office", 401)
            if change and not (self._by_token(request) or csrf_ok(request)):
                return _error("this change did not come from the back office's page (CSRF check)", 403)
            try:
                return await handler(request, who)
            except ConfigError as exc:
                return _error(str(exc), 400)
            except UnknownRoom as exc:
                return _error(str(exc), 404)
            except StoreError as exc:
                return _error(f"Redis unavailable: {exc}", 503)

        return guarded

    def _by_token(self, request: Request) -> bool:
        # A script with the secret as a bearer token carries no cookie a page
        # on another site could ride on: no CSRF token needed.
        bearer = request.headers.get("authorization", "")
        return (
            self.guard.login_form and bearer.startswith("Bearer ") and self.guard.secret_matches(bearer[7:])
        )

    async def page(self, request: Request) -> Response:
        if not self.guard.configured:
            return HTMLResponse(
                "<!doctype html><title>Back office</title><h1>The back office is not configured</h1>"
                "<p>Pass <code>auth=</code> or <code>secret=</code> to <code>queuegate.admin.app</code>.</p>",
                403,
            )
        who = await self.guard.operator(request)
        if who is None:
            if self.guard.login_form:
                return RedirectResponse(self._root(request) + "login", 303)
            # Whoever lands here learns how to get in, not only that they are out.
            notice = NOTICE.format(
                title="Not signed in", root=html.escape(self._root(request)), text=html.escape(self.sign_in)
            )
            return HTMLResponse(notice, 401, headers=_page_headers())
        links = "".join(f'<a href="{html.escape(url)}">{html.escape(text)}</a>' for text, url in self.links)
        body = PAGE.replace("{{root}}", html.escape(self._root(request))).replace("{{who}}", html.escape(who))
        sign_out = SIGN_OUT if self.guard.login_form else ""
        body = body.replace("{{links}}", links).replace("{{logout}}", sign_out)
        response = HTMLResponse(body, headers=_page_headers())
        token = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
        response.set_cookie(
            CSRF_COOKIE,
            token,
            samesite="strict",
            path=self._root(request),
            secure=request.url.scheme == "https",
        )
        return response

    async def login(self, request: Request) -> Response:
        if not self.guard.login_form:
            return _error("sign in through the app (this back office uses the app's own auth)", 404)
        failed = name = ""
        if request.method == "POST":
            if not same_origin(request):
                return _error("the sign-in did not come from this site", 403)
            form = parse_qs((await _body(request)).decode("utf-8", "replace"))
            if self.guard.secret_matches(form.get("secret", [""])[0]):
                response = RedirectResponse(self._root(request), 303)
                response.set_cookie(
                    SESSION_COOKIE,
                    self.guard.session_cookie(operator_name(form.get("name", [""])[0])),
                    max_age=SESSION_HOURS * 3600,
                    httponly=True,
                    samesite="strict",
                    path=self._root(request),
                    secure=request.url.scheme == "https",
                )
                return response
            failed = '<p class="error" role="alert">That is not the back office\'s secret.</p>'
            # The name typed is kept for the next try (only the secret is wrong).
            name = form.get("name", [""])[0][:40]
        body = (
            LOGIN.replace("{{root}}", html.escape(self._root(request)))
            .replace("{{failed}}", failed)
            .replace("{{name}}", html.escape(name))
        )
        return HTMLResponse(body, 401 if failed else 200, headers=_page_headers())

    async def logout(self, request: Request) -> Response:
        if not same_origin(request):
            return _error("the sign-out did not come from this site", 403)
        response = RedirectResponse(self._root(request) + "login", 303)
        response.delete_cookie(SESSION_COOKIE, path=self._root(request))
        return response

    # -- reading ----------------------------------------------------------

    async def rooms(self, request: Request, who: str) -> Response:
        async def read(name: str) -> dict[str, Any]:
            stats = await self.store.stats(name)
            figures = await self.store.analytics(name, minutes=0)
            return {"room": name, **self._described(name, stats), "waits": _short(figures)}

        # Many rooms at a time; a room gone since it was listed is left out.
        rooms = list((await each_room(await self.store.room_names(), read)).values())
        return JSONResponse(
            {
                "now": self.store.redis_now_ms(),
                "who": who,
                "settings": sorted(SETTABLE),
                "rooms": rooms,
                "simulation": self.virtual.figures() if self.virtual is not None else None,
                "virtual_visitors": self.virtual is not None,
            }
        )

    async def room(self, request: Request, who: str) -> Response:
        name = request.path_params["room"]
        minutes = _bounded_int(request.query_params.get("minutes", "1440"), "minutes", 1, 2880)
        stats = await self.store.stats(name)
        return JSONResponse(
            {
                "room": name,
                "now": stats["now"],
                "stats": self._described(name, stats),
                "analytics": await self.store.analytics(name, minutes=minutes),
                "visitors": await self.store.visitors(name, 10),
                "activity": await activity.latest(self.store, 20, room=name),
            }
        )

    async def activity(self, request: Request, who: str) -> Response:
        count = _bounded_int(request.query_params.get("count", "50"), "count", 1, activity.KEEP)
        return JSONResponse({"activity": await activity.latest(self.store, count)})

    def _described(self, name: str, stats: dict[str, Any]) -> dict[str, Any]:
        """A room's stats, with its title from code ("" when unknown) and
        its controller's last reason as a short verdict."""
        return {
            **stats,
            "title": self._title(name),
            "health_verdict": verdict(str(stats.get("health_reason", ""))),
            "health_stale_ms": health_age_ms(stats),
        }

    def _title(self, name: str) -> str:
        """The room's title from code; "" when unknown, or when the code's
        title (a template's function of the values) fails: logged, not an
        error of every read of the rooms."""
        if self.code_rooms is None:
            return ""
        try:
            room = self.code_rooms.room(name)
            return room.title_in("en") if room is not None else ""
        except Exception:
            # Once a room: the rooms are read every 2 s per open page.
            if name not in self._untitled and len(self._untitled) < 1000:
                self._untitled.add(name)
                logger.exception("queuegate: the title of room %r could not be made (its code's title)", name)
            return ""

    # -- changing ---------------------------------------------------------

    async def configure(self, request: Request, who: str) -> Response:
        name = request.path_params["room"]
        changes = await _json(request)
        # `reset_all: true`: every setting back to the code's, and a pin
        # removed, read and written in one script (`queuegate set --reset all`).
        reset_all = changes.pop("reset_all", False)
        if not isinstance(reset_all, bool):
            raise ConfigError("reset_all must be true or false")
        unknown = sorted(set(changes) - SETTABLE)
        if unknown:
            raise ConfigError(f"cannot set {', '.join(unknown)} here")
        before = await self.store.stats(name)  # an unknown room fails here, before anything is written
        await self.store.configure(name, who=who, reset_all=reset_all, **changes)  # logged by the same call
        try:
            after = await self.store.stats(name)
        except StoreError:
            # Made: only what it risks is not known (a read after it failed).
            return JSONResponse({"room": name, "warnings": [NOT_READ_AFTER]})
        return JSONResponse({"room": name, **after, "warnings": risks(before, after)})

    async def visitor_action(self, request: Request, who: str) -> Response:
        name, action = request.path_params["room"], request.path_params["action"]
        visitor = (await _json(request)).get("visitor")
        if not isinstance(visitor, str) or not 0 < len(visitor) <= 200:
            raise ConfigError("visitor must be a visitor id (from the lists above)")
        # An unknown room fails in the call itself, which changes nothing but
        # still revokes copies of the visitor's admission (the room's data
        # may have been lost: see Store.leave).
        change = self.store.release if action == "release" else self.store.leave
        held = await change(name, visitor, who=who)
        return JSONResponse({"room": name, "visitor": visitor, "held_a_place": held})

    async def drain(self, request: Request, who: str) -> Response:
        name = request.path_params["room"]
        await self.store.stats(name)
        removed = await self.store.drain(name, who=who)
        return JSONResponse({"room": name, "removed": removed})

    async def seed(self, request: Request, who: str) -> Response:
        """Reveal the lottery's secret seed, to publish after the draw."""
        name = request.path_params["room"]
        stats = await self.store.stats(name)
        seed = await self.store.seed(name)
        await self.store.note(name, "reveal seed", {"seed_sha256": stats["seed_sha256"]}, who=who)
        return JSONResponse({"room": name, "seed": seed, "seed_sha256": stats["seed_sha256"]})

    async def start_simulation(self, request: Request, who: str) -> Response:
        if self.virtual is None:
            return _error("virtual visitors are off: pass visitors_url= to queuegate.admin.app", 409)
        if self.virtual.running:
            return _error("virtual visitors are already running", 409)
        details = self.virtual.start(await _json(request))
        await activity.record(self.store, who, "virtual visitors", details)
        return JSONResponse({"running": True, **details})

    async def aclose(self) -> None:
        if self.virtual is not None:
            self.virtual.cancel()

    def routes(self) -> list[Route | Mount]:
        api = self.api

        def change(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
            return self.api(handler, change=True)

        if not self.guard.configured:
            # Every request is refused, the static files included: the page
            # says why, anything else gets the API's error (or a close).
            return [Route("/", self.page), Mount("", app=_not_configured)]
        return [
            Route("/", self.page),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/api/rooms", api(self.rooms)),
            Route("/api/rooms/{room}", api(self.room)),
            Route("/api/rooms/{room}", change(self.configure), methods=["POST"]),
            Route("/api/rooms/{room}/{action:str}", change(self._room_action), methods=["POST"]),
            Route("/api/activity", api(self.activity)),
            Route("/api/simulate", change(self.start_simulation), methods=["POST"]),
            Mount("/static", StaticFiles(packages=[("queuegate.admin", "static")]), name="static"),
        ]

    async def _room_action(self, request: Request, who: str) -> Response:
        action = request.path_params["action"]
        if action in ("release", "remove"):
            return await self.visitor_action(request, who)
        if action == "drain":
            return await self.drain(request, who)
        if action == "seed":
            return await self.seed(request, who)
        return _error(f"no such action {action!r}: release, remove, drain or seed", 404)


def app(
    store: Store,
    *,
    auth: Auth | None = None,
    secret: str | None = None,
    visitors_url: str | None = None,
    links: Sequence[tuple[str, str]] = (),
    sign_in: str = SIGN_IN,
    rooms: Sequence[Room] = (),
) -> Starlette:
    """The back office, an ASGI app to mount (``app.mount("/admin", ...)``).

    ``auth(request)`` returns the operator's name, or None to refuse (it may
    be async); or, without it, ``secret`` (12 characters or more) enables a
    sign-in form. With neither, every request is refused. ``visitors_url``
    (the site's base URL) enables virtual visitors; ``links`` adds (text, url)
    links to the header. ``sign_in`` tells someone ``auth`` refused how to
    sign in (plain text). ``rooms``, the gate's rooms, lets it show each
    room's ``title`` beside its name (Redis does not keep titles).
    """
    office = BackOffice(store, Guard(auth, secret), visitors_url, links, sign_in, rooms)
    starlette = Starlette(routes=office.routes())
    starlette.state.office = office
    return starlette


def _short(figures: dict[str, Any]) -> dict[str, Any]:
    admitted, gave_up = figures["waits"]["admitted"], figures["waits"]["gave_up"]
    return {
        "admitted_p50_ms": admitted["p50_ms"],
        "admitted_p90_ms": admitted["p90_ms"],
        "gave_up": gave_up["count"],
        "gave_up_p50_ms": gave_up["p50_ms"],
        "estimate_share": figures["estimate"]["share"],
        "estimate_checked": figures["estimate"]["checked"],
    }


def _page_headers() -> dict[str, str]:
    return {
        "cache-control": "no-store",
        "content-security-policy": CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "same-origin",
    }


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers={"cache-control": "no-store"})


NOT_CONFIGURED = "the back office has no auth: pass auth= or secret= to queuegate.admin.app"


async def _not_configured(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await WebSocketClose(1008)(scope, receive, send)  # policy violation
    elif scope["type"] == "http":
        await _error(NOT_CONFIGURED, 403)(scope, receive, send)


def _bounded_int(text: str, name: str, low: int, high: int) -> int:
    if not text.isdigit() or not low <= int(text) <= high:
        raise ConfigError(f"{name} must be a whole number from {low} to {high}")
    return int(text)


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise ConfigError(f"the body is over {MAX_BODY // 1024} KiB")
    return body


async def _json(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ConfigError("send the change as JSON (content-type: application/json)")
    body = await _body(request)
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise ConfigError("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise ConfigError("the body must be a JSON object")
    return data
