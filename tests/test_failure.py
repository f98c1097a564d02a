"""Redis down or silent: every request still gets its answer in bounded time."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest

from queuegate import Room
from queuegate.embedded import EmbeddedServer

from .conftest import MakeGate, client_for, lifespan_app, running
from .stalls import Stalls

pytestmark = pytest.mark.anyio

TIMEOUT = 0.2
MARGIN = 0.3  # scheduling slack on a loaded 2-core machine, beyond the event loop's own stalls


@pytest.fixture
async def black_hole() -> AsyncIterator[str]:
    """A port that accepts connections and never answers: a hung Redis."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"redis://127.0.0.1:{port}/0"
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def room(fail: str) -> Room:
    return Room("sale", paths=["/checkout*"], rate=1, per=60.0, fail=fail)  # type: ignore[arg-type]


async def _timed_get(
    client: object, path: str = "/checkout"
) -> tuple[int, tuple[float, float], dict[str, str]]:
    """The answer's status, when it was asked and answered, its headers."""
    start = time.monotonic()
    response = await client.get(path)  # type: ignore[attr-defined]
    return response.status_code, (start, time.monotonic()), dict(response.headers)


def _calls(answers: list[tuple[int, tuple[float, float], dict[str, str]]]) -> list[tuple[int, float, float]]:
    return [(i, *when) for i, (_, when, _) in enumerate(answers)]


async def test_closed_mode_answers_503_in_time_when_redis_dies_then_recovers(
    make_gate: MakeGate, own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    gate = await make_gate(rooms=[room("closed")], redis=own_server.url, timeout=TIMEOUT)
    async with client_for(gate) as admitted, client_for(gate) as other:
        assert (await admitted.get("/checkout")).status_code == 200
        own_server.kill()
        with Stalls() as stalls:
            answers = [(client, await _timed_get(client)) for client in (admitted, other, admitted, other)]
        late = stalls.late(_calls([answer for _, answer in answers]), TIMEOUT + MARGIN)
        assert not late, late
        for client, (status, _, headers) in answers:
            if client is admitted:
                # Admitted before the outage, its session still running: not
                # thrown out mid-checkout.
                assert status == 200
                continue
            assert status == 503
            assert headers["retry-after"] == "5"
            assert headers["cache-control"] == "no-store"
        assert gate.counters["failed_closed"] == 4
        assert gate.counters["outage_passed"] == 2
        # Said once for the burst, with what visitors get.
        said = [r.getMessage() for r in caplog.records if "did not answer for room" in r.getMessage()]
        assert len(said) == 1, said
        assert said[0].endswith("; failing closed (a 503 page, but for visitors admitted before)")
        # Same port, empty data: the gate reconnects and reloads its scripts.
        own_server.start()
        deadline = time.monotonic() + 5
        while (await admitted.get("/checkout")).status_code != 200:
            assert time.monotonic() < deadline, "gate did not recover after the restart"
            await asyncio.sleep(0.05)
        assert (await other.get("/checkout")).status_code == 503  # waits again, no error


async def test_open_mode_forwards_in_time_and_counts(
    make_gate: MakeGate, own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    gate = await make_gate(rooms=[room("open")], redis=own_server.url, timeout=TIMEOUT)
    own_server.kill()
    with Stalls() as stalls:
        async with client_for(gate) as client:
            answers = [await _timed_get(client) for _ in range(3)]
    assert [status for status, _, _ in answers] == [200] * 3
    late = stalls.late(_calls(answers), TIMEOUT + MARGIN)
    assert not late, late
    assert gate.counters["failed_open"] == 3
    assert "; failing open (requests go on to the app ungated)" in caplog.text


@pytest.mark.parametrize("fail", ["closed", "open"])
async def test_silent_redis_is_cut_off_at_the_timeout(
    make_gate: MakeGate, black_hole: str, fail: str
) -> None:
    gate = await make_gate(rooms=[room(fail)], redis=black_hole, timeout=TIMEOUT)
    with Stalls() as stalls:
        async with client_for(gate) as client:
            results = await asyncio.gather(*(_timed_get(client) for _ in range(5)))
    assert [status for status, _, _ in results] == [503 if fail == "closed" else 200] * 5
    late = stalls.late(_calls(results), TIMEOUT + MARGIN)
    assert not late, late


async def test_status_and_leave_report_unavailable(make_gate: MakeGate, black_hole: str) -> None:
    gate = await make_gate(rooms=[room("closed")], redis=black_hole, timeout=TIMEOUT)
    async with client_for(gate) as client:
        cookie = {"cookie": f"qg_sale={gate.tokens.issue('sale', 'A' * 16)}"}
        status = await client.get("/_queuegate/status/sale", headers=cookie)
        assert (status.status_code, status.json()["state"]) == (503, "unavailable")
        left = await client.post("/_queuegate/leave/sale", headers=cookie)
        assert left.status_code == 503


@pytest.fixture
def dead_port() -> int:
    """A port where nothing listens: a Redis that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("fail", ["closed", "open"])
@pytest.mark.parametrize("server", ["down", "silent"])
async def test_a_cluster_out_of_reach_is_an_outage_in_time(
    make_gate: MakeGate, black_hole: str, dead_port: int, fail: str, server: str
) -> None:
    """A cluster's client first learns the slot map from a node; a node
    down or silent is an outage like any other (not an error page), and a
    request waits no longer than the timeout for the map, at the start and
    while the outage lasts."""
    port = dead_port if server == "down" else int(black_hole.rsplit(":", 1)[1].split("/")[0])
    gate = await make_gate(rooms=[room(fail)], redis=f"redis+cluster://127.0.0.1:{port}", timeout=TIMEOUT)
    taken: list[tuple[int, float, float]] = []
    with Stalls() as stalls:
        async with client_for(gate) as client:
            for moment in range(3):
                results = await asyncio.gather(*(_timed_get(client) for _ in range(3)))
                for status, when, _ in results:
                    assert status == (503 if fail == "closed" else 200), moment
                    taken.append((moment, *when))
                await asyncio.sleep(0.3)
    late = stalls.late(taken, TIMEOUT + MARGIN)
    assert not late, late
    assert gate.counters[f"failed_{fail}"] == 9


async def test_startup_connects_and_loads_every_script(
    make_gate: MakeGate, own_server: EmbeddedServer
) -> None:
    """The first request after a deploy keeps its whole deadline: the
    lifespan's startup has already connected, learnt Redis's time and loaded
    the scripts (the first request used to spend its 0.25 s on that)."""
    import hashlib

    import redis

    from queuegate.scripts import SCRIPTS, script

    gate = await make_gate(lifespan_app, rooms=[room("closed")], redis=own_server.url, timeout=TIMEOUT)
    shas = [hashlib.sha1(script(name).encode()).hexdigest() for name in SCRIPTS]
    with redis.Redis.from_url(own_server.url) as plain:
        assert not any(plain.script_exists(*shas))  # a server that never saw them
        async with running(gate):
            assert all(plain.script_exists(*shas))
            assert gate.store.clock.offset is not None


@pytest.mark.parametrize("redis_at", ["down", "silent"])
async def test_startup_without_redis_completes_in_time_and_says_so(
    make_gate: MakeGate, black_hole: str, dead_port: int, redis_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = black_hole if redis_at == "silent" else f"redis://127.0.0.1:{dead_port}/0"
    gate = await make_gate(lifespan_app, rooms=[room("closed")], redis=url, timeout=TIMEOUT)
    with Stalls() as stalls:
        start = time.monotonic()
        async with running(gate):
            started = time.monotonic()
            async with client_for(gate) as client:
                assert (await client.get("/checkout")).status_code == 503  # fails closed, as configured
    assert not stalls.late([("startup", start, started)], TIMEOUT + MARGIN)
    assert "Redis did not answer at startup" in caplog.text
    # What visitors get, and how to check the URL from the app's host.
    assert "(closed: a 503 page, but for visitors admitted before)" in caplog.text
    assert "queuegate --redis URL list" in caplog.text
