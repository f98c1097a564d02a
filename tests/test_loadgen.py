"""The benchmarks' lean visitor client (benchmarks.loadgen.Browser) against
a real uvicorn: a benchmark whose client misreads answers measures nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from benchmarks.loadgen import Browser, run_load
from queuegate.embedded import free_port

from .conftest import served

pytestmark = pytest.mark.anyio


async def set_cookie(request: Request) -> Response:
    response = PlainTextResponse("set")
    response.set_cookie("qg_room", "token-1", httponly=True, samesite="lax")
    response.set_cookie("other", "x")
    return response


async def forget(request: Request) -> Response:
    response = PlainTextResponse("gone")
    response.delete_cookie("other")
    return response


async def echo(request: Request) -> Response:
    return JSONResponse({"cookies": request.cookies, "accept": request.headers.get("accept")})


async def chunked(request: Request) -> Response:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one,", b"two,", b"three"):
            yield part

    return StreamingResponse(parts())


async def closing(request: Request) -> Response:
    return PlainTextResponse("bye", headers={"connection": "close"})


APP = Starlette(
    routes=[
        Route("/", echo),
        Route("/set", set_cookie),
        Route("/forget", forget),
        Route("/chunked", chunked),
        Route("/close", closing),
    ]
)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with served(APP) as base:
        yield int(base.rsplit(":", 1)[1])


async def test_it_keeps_cookies_as_a_browser_does(port: int) -> None:
    browser = Browser(port)
    try:
        assert await browser.get("/set") == (200, b"set")
        status, body = await browser.get("/", "application/json")
        assert status == 200
        assert body == b'{"cookies":{"qg_room":"token-1","other":"x"},"accept":"application/json"}'
        await browser.get("/forget")
        assert browser.cookies == {"qg_room": "token-1"}
    finally:
        browser.close()


async def test_it_reads_chunked_bodies_and_closed_connections(port: int) -> None:
    browser = Browser(port)
    try:
        assert await browser.get("/chunked") == (200, b"one,two,three")
        assert await browser.get("/close") == (200, b"bye")
        assert browser._stream is None  # the server said it closes
        # A connection the server closed while idle is opened again.
        assert (await browser.get("/chunked"))[1] == b"one,two,three"
        assert browser._stream is not None
        browser._stream[1].transport.abort()  # as a keep-alive timeout would
        assert (await browser.get("/chunked"))[1] == b"one,two,three"
    finally:
        browser.close()


async def test_an_unreachable_server_is_refused() -> None:
    with pytest.raises(ConnectionRefusedError):
        await Browser(free_port()).get("/")


def test_generators_in_several_processes_share_the_connections(port: int) -> None:
    result = run_load(port, "/", 1.0, 4, {}, True, generators=2)
    assert result.errors == 0
    assert result.requests > 0
    assert result.generators == 2
    assert 0.0 < result.generator_busy <= 1.5  # a share of a core, the busiest generator's


def test_a_paced_load_sends_at_its_rate(port: int) -> None:
    result = run_load(port, "/", 1.0, 8, {}, False, rate=200)
    assert result.errors == 0
    assert result.offered_rps == 200
    # On schedule: about 200 requests in the second, never more.
    assert 140 <= result.requests <= 201
    assert result.generator_busy < 0.9
