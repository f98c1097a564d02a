"""Pushed updates: the waiting page's stream (Server-Sent Events) through a
real server. The rooms here poll every 20 s (a capacity room whose wait is
unknown); with the feeds' flushes and resyncs an hour apart and no read of
a stream's own counted, a turn that reaches the stream can only have been
pushed, at once (a wall clock of 1 s measured a loaded machine as well)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from queuegate import QueueGate, Room, Store, feeds
from queuegate.store import connect

from .conftest import SECRET, lifespan_app, served


def stream_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, object]]]:
    name, data = "message", ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:"):
            data += line.partition(":")[2].strip()
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


def gate_for(redis_url: str, local_admissions: bool = True) -> QueueGate:
    return QueueGate(
        lifespan_app,
        rooms=[Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
        local_admissions=local_admissions,
    )


@pytest.mark.parametrize("local_admissions", [True, False])
def test_the_turn_is_pushed_the_moment_it_comes(
    redis_url: str, local_admissions: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies on or off, the one subscription wakes the streams."""
    monkeypatch.setattr(feeds, "FLUSH", 3600.0)
    gate = gate_for(redis_url, local_admissions)
    with served(gate) as base, httpx.Client() as holder, httpx.Client() as waiter:
        assert holder.get(base + "/checkout").status_code == 200  # the one slot
        assert waiter.get(base + "/checkout").status_code == 503  # first in line
        with waiter.stream("GET", base + "/_queuegate/stream/sale", timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-store"
            events = stream_events(response)
            name, first = next(events)
            assert (name, first["state"], first["position"]) == ("waiting", "waiting", 1)
            assert first["poll_after_seconds"] == 20  # polling would learn it up to 20 s late
            counted = gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs
            holder.post(base + "/_queuegate/leave/sale")  # the slot frees up: the waiter's turn
            name, turn = next(events)
    assert (name, turn["state"]) == ("state", "active")
    assert (gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs) == counted


def test_a_turn_another_process_gives_is_pushed_at_once_every_time(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move comes from another process (new settings let the next one
    in), so nothing in the serving process knew of it before its message:
    the stream's check must not answer from a copy of the line that message
    has not reached yet (queuegate.fronts). Five turns, one after another."""
    monkeypatch.setattr(feeds, "FLUSH", 3600.0)
    gate = gate_for(redis_url)
    room = Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)
    with served(gate) as base, httpx.Client() as holder:
        assert holder.get(base + "/checkout").status_code == 200  # the one slot
        for turn_number in range(1, 6):
            with httpx.Client() as waiter, httpx.Client() as behind:
                assert waiter.get(base + "/checkout").status_code == 503  # first in line
                assert behind.get(base + "/checkout").status_code == 503  # keeps a copy worth having
                with waiter.stream("GET", base + "/_queuegate/stream/sale", timeout=30) as response:
                    events = stream_events(response)
                    name, first = next(events)
                    assert (name, first["position"]) == ("waiting", 1)
                    assert behind.get(base + "/_queuegate/status/sale").json()["position"] == 2
                    counted = gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs
                    asyncio.run(_let_one_more_in(redis_url, room, turn_number + 1))
                    name, turn = next(events)
                assert (name, turn["state"]) == ("state", "active"), turn_number
                assert (gate.endpoints.feeds.reads, gate.endpoints.feeds.resyncs) == counted, turn_number
                behind.post(base + "/_queuegate/leave/sale")


async def _let_one_more_in(redis_url: str, room: Room, capacity: int) -> None:
    other = Store(connect(redis_url, 5.0))
    try:
        await other.configure(room, capacity=capacity)
        await other.stats(room)  # the call that moves the line (and settles the room)
    finally:
        await other.aclose()


def test_a_stream_without_a_place_says_so_and_ends(redis_url: str) -> None:
    with served(gate_for(redis_url)) as base, httpx.Client() as stranger:
        response = stranger.get(base + "/_queuegate/stream/sale")
        assert response.json() == {"room": "sale", "state": "none"}
        assert stranger.post(base + "/_queuegate/stream/sale").status_code == 405


def test_a_head_of_a_stream_ends_at_once(redis_url: str) -> None:
    """A HEAD of the stream of a visitor in line gets the stream's headers
    and ends: it held its connection and one of the visitor's streams until
    the client hung up, even with `Connection: close` (an auditor, on h11
    and hypercorn). Sent raw: the server, not the client, ends it."""
    import socket

    with served(gate_for(redis_url)) as base, httpx.Client() as holder, httpx.Client() as waiter:
        holder.get(base + "/checkout")
        waiter.get(base + "/checkout")
        host, port = base.removeprefix("http://").split(":")
        cookie = f"qg_sale={waiter.cookies['qg_sale']}"
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            raw.sendall(
                f"HEAD /_queuegate/stream/sale HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            answer = b""
            while chunk := raw.recv(4096):  # ends when the server closes (a timeout raises)
                answer += chunk
        head = answer.decode().lower()
        assert head.startswith("http/1.1 200"), head
        assert "content-type: text/event-stream" in head


def test_one_visitor_cannot_multiply_streams(redis_url: str) -> None:
    """Each stream makes status calls: a visitor holds at most 4 at once in a
    process; the next is told so (429) and its page polls instead."""
    from queuegate.endpoints import MAX_STREAMS_PER_VISITOR

    gate = gate_for(redis_url)
    with served(gate) as base, httpx.Client() as holder, httpx.Client() as waiter:
        holder.get(base + "/checkout")
        waiter.get(base + "/checkout")
        with contextlib.ExitStack() as streams:
            held = []  # the readers too: closing one closes its stream
            for _ in range(MAX_STREAMS_PER_VISITOR):
                response = streams.enter_context(waiter.stream("GET", base + "/_queuegate/stream/sale"))
                held.append(stream_events(response))
                assert next(held[-1])[0] == "waiting"
            assert gate.endpoints._streams == {
                ("sale", waiter.cookies["qg_sale"].split(".")[0].split("~")[0]): 4
            }
            extra = waiter.get(base + "/_queuegate/stream/sale")
            assert extra.status_code == 429
            assert extra.json()["state"] == "too_many_streams"
        # Closed streams are counted out again.
        deadline = time.monotonic() + 5
        while gate.endpoints._streams:
            assert time.monotonic() < deadline, gate.endpoints._streams
            time.sleep(0.05)
        with waiter.stream("GET", base + "/_queuegate/stream/sale") as again:
            assert next(stream_events(again))[0] == "waiting"
