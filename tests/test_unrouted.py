"""A room whose paths no route of the app matches is said at startup: a
typo in a pattern (``/ticket`` before a route ``/tickets``) gated nothing
the app serves and let everyone through without a word."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Host, Mount, Route, Router

from queuegate import QueueGate, Room
from queuegate.unrouted import say_unrouted

from .conftest import PATIENT, SECRET, lifespan_app, running

pytestmark = pytest.mark.anyio


async def page(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


SHOP = [
    Route("/", page),
    Route("/tickets", page),
    Route("/tickets/{event}/buy", page, methods=["GET", "POST"]),
    Mount("/api", routes=[Route("/orders", page), Route("/orders/{id}", page)]),
    Mount("/legacy", app=lifespan_app),  # its own routes are its own
    Route("/events/{event}", page),
    Route("/files/{name:path}", page),
]


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "match no route of the app" in r.getMessage()]


@pytest.mark.parametrize(
    "paths",
    [
        ["/tickets"],
        ["/tickets*"],
        ["/tickets/*"],  # /tickets/x/buy is routed
        ["/tickets/{event}/buy"],
        ["/tickets/*/buy*"],
        ["/api/orders*"],
        ["/API/Orders/*"],  # the gate matches case-folded
        ["/legacy/anything"],  # a mounted app: not judged
        ["/nowhere", "/tickets"],  # one pattern routed is enough
        ["/events/summer-sale"],  # a page under a route's parameter
        ["/events/summer-sale*"],
        ["/files/private/*"],  # under a {name:path}
    ],
)
def test_patterns_a_route_matches_are_not_said(paths: list[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        say_unrouted(Router(SHOP), [Room("drop", paths=paths, rate=1)])
    assert said(caplog) == []


def test_a_typo_is_said_with_the_routes_most_like_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        say_unrouted(Router(SHOP), [Room("drop", paths=["/ticket"], rate=1), Room("route-bound", rate=1)])
    assert said(caplog) == [
        "queuegate: room 'drop' has paths ['/ticket'] that match no route of the app, so it gates no page "
        "the app serves: check the patterns (the app's routes most like them: /tickets)"
    ]


@pytest.mark.parametrize("paths", [["/apix/checkout"], ["/api/order"], ["/legacyx"]])
def test_near_misses_of_mounts_are_said(paths: list[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        say_unrouted(Router(SHOP), [Room("drop", paths=paths, rate=1)])
    assert len(said(caplog)) == 1


def test_a_catch_all_route_routes_everything(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        say_unrouted(Router([Route("/{full:path}", page)]), [Room("drop", paths=["/checkout*"], rate=1)])
    assert said(caplog) == []


class Raising:
    @property
    def routes(self) -> list[object]:
        raise RuntimeError("routes of an app's own kind")


class NotStarlettes:
    def __init__(self) -> None:
        self.routes = [type("LitestarRoute", (), {"path": "/legacy"})()]  # another library's: not judged


def test_routes_that_cannot_be_read_are_not_judged_and_never_stop_a_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    looped = Starlette(routes=[Route("/a", page)])
    looped.routes.append(Mount("/v1", app=looped))  # mounted in itself
    apps = [Raising(), NotStarlettes(), looped, Router([Host("shop.example", app=lifespan_app)])]
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        for app in apps:
            say_unrouted(app, [Room("drop", paths=["/nowhere"], rate=1)])
    assert said(caplog) == []


async def test_said_at_startup_through_middleware_for_starlette_and_fastapi(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Added with ``add_middleware`` (the gate's next app is another
    middleware or the router) or wrapped around the app; the routes added
    after the middleware count (a Starlette app builds its stack at
    startup)."""
    options: dict[str, Any] = {"secret_key": SECRET, "redis": redis_url, "environ": {}, "timeout": PATIENT}
    rooms = [Room("drop", paths=["/ticket"], rate=1)]
    starlette = Starlette(middleware=[Middleware(QueueGate, rooms=rooms, **options)])
    starlette.add_route("/tickets", page)
    fastapi = FastAPI()
    fastapi.add_middleware(QueueGate, rooms=rooms, **options)
    fastapi.get("/tickets")(page)
    wrapped = QueueGate(FastAPI(routes=[Route("/tickets", page)]), rooms=rooms, **options)
    for app in (starlette, fastapi, wrapped):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="queuegate"):
            async with running(app):
                pass
        assert len(said(caplog)) == 1, (app, said(caplog))
        assert said(caplog)[0].endswith("(the app's routes most like them: /tickets)")
    await wrapped.aclose()


async def test_an_app_whose_routes_cannot_be_read_is_not_judged(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gate = QueueGate(
        lifespan_app,
        rooms=[Room("drop", paths=["/ticket"], rate=1)],
        secret_key=SECRET,
        redis=redis_url,
        environ={},
        timeout=PATIENT,
    )
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        async with running(gate):
            pass
    await gate.aclose()
    assert said(caplog) == []
