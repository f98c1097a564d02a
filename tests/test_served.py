"""The app served instead of the gate in front of it is said at startup:
``gate = QueueGate(app, ...)`` then ``uvicorn shop:app`` answered every
/checkout with 200 and logged nothing (a newcomer's trial)."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from queuegate import QueueGate, Room

from .conftest import PATIENT, SECRET, lifespan_app, running, uvicorn_get

pytestmark = pytest.mark.anyio

ROOMS = [Room("sale", paths=["/checkout*"], rate=1)]
NOT_SERVED = "queuegate: the gate is not being served"

SHOP = """
from fastapi import FastAPI
from queuegate import QueueGate, Room

app = FastAPI()


@app.get("/checkout")
def checkout() -> dict[str, str]:
    return {{"ok": "yes"}}


gate = QueueGate(
    app, rooms=[Room("sale", paths=["/checkout*"], rate=1)], secret_key={secret!r}, redis={redis!r}
)
"""


async def page(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(NOT_SERVED)]


def options(redis_url: str) -> dict[str, Any]:
    return {"secret_key": SECRET, "redis": redis_url, "environ": {}, "timeout": PATIENT}


def test_the_fastapi_app_served_instead_of_its_gate_is_said_at_startup(
    tmp_path: Path, redis_url: str
) -> None:
    (tmp_path / "shop.py").write_text(SHOP.format(secret=SECRET, redis=redis_url))
    status, log = uvicorn_get(tmp_path, "shop:app", "/checkout", "--lifespan", "on")
    assert status == 200  # what the newcomer saw: the room gates nothing
    lines = [line for line in log.splitlines() if line.startswith(NOT_SERVED)]
    assert len(lines) == 1, log
    assert "its rooms (sale) gate nothing" in lines[0]
    assert "run `uvicorn shop:gate`, not `uvicorn shop:app`" in lines[0]
    # Serving the gate says nothing of the kind, and gates /checkout.
    status, log = uvicorn_get(tmp_path, "shop:gate", "/checkout", "--lifespan", "on")
    assert status == 200  # the first visitor, let in
    assert NOT_SERVED not in log, log


async def test_the_app_served_instead_of_its_gate_is_said_for_starlette_and_fastapi(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the app's lifespan (none, a lifespan function, startup
    handlers, routers included after the gate was made)."""

    @asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        yield

    starlette = Starlette(routes=[Route("/checkout", page)], lifespan=lifespan)
    fastapi = FastAPI()
    fastapi.get("/checkout")(page)
    gates = [QueueGate(app, rooms=ROOMS, **options(redis_url)) for app in (starlette, fastapi)]
    later = APIRouter(lifespan=lifespan)
    later.get("/later")(page)
    fastapi.include_router(later)
    for app in (starlette, fastapi):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="queuegate"):
            async with running(app):
                pass
        assert len(said(caplog)) == 1, (app, caplog.records)
        assert "its rooms (sale) gate nothing" in said(caplog)[0]
        assert "Serve the QueueGate object, not the app it wraps" in said(caplog)[0]
    for gate in gates:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="queuegate"):
            async with running(gate):
                pass
        assert said(caplog) == []
        await gate.aclose()


async def test_no_false_alarm_for_a_gate_in_the_apps_own_stack_or_a_gate_dropped(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``add_middleware`` (or ``middleware=[...]``) puts the gate in the
    app's stack: the app's lifespan comes through it. A gate made and
    dropped gates nothing, so there is nothing to serve. An app that is
    not Starlette's cannot be watched, and is not."""
    starlette = Starlette(
        routes=[Route("/checkout", page)],
        middleware=[Middleware(QueueGate, rooms=ROOMS, **options(redis_url))],
    )
    fastapi = FastAPI()
    fastapi.add_middleware(QueueGate, rooms=ROOMS, **options(redis_url))
    fastapi.get("/checkout")(page)
    dropped_around = Starlette(routes=[Route("/checkout", page)])
    plain = QueueGate(lifespan_app, rooms=ROOMS, **options(redis_url))
    QueueGate(dropped_around, rooms=ROOMS, **options(redis_url))
    gc.collect()  # (a gate holds cycles of its own: dropped, it goes at the next collection)
    with caplog.at_level(logging.ERROR, logger="queuegate"):
        for app in (starlette, fastapi, dropped_around, lifespan_app):
            async with running(app):
                pass
    assert said(caplog) == []
    await plain.aclose()
