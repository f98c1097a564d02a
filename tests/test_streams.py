"""Pushed updates: the waiting page's stream (Server-Sent Events) through a
real server. The rooms here poll every 20 s (a capacity room whose wait is
unknown), so an answer within a second can only have been pushed."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import httpx

from queuegate import QueueGate, Room

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


def gate_for(redis_url: str) -> QueueGate:
    return QueueGate(
        lifespan_app,
        rooms=[Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
    )


def test_the_turn_is_pushed_the_moment_it_comes(redis_url: str) -> None:
    gate = gate_for(redis_url)
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
            freed = time.monotonic()
            holder.post(base + "/_queuegate/leave/sale")  # the slot frees up: the waiter's turn
            name, turn = next(events)
            pushed = time.monotonic() - freed
    assert (name, turn["state"]) == ("state", "active")
    assert pushed < 1.0, f"the turn reached the stream {pushed:.2f} s after it came"


def test_a_stream_without_a_place_says_so_and_ends(redis_url: str) -> None:
    with served(gate_for(redis_url)) as base, httpx.Client() as stranger:
        response = stranger.get(base + "/_queuegate/stream/sale")
        assert response.json() == {"room": "sale", "state": "none"}
        assert stranger.post(base + "/_queuegate/stream/sale").status_code == 405


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
