"""The leaving benchmark's machinery (benchmarks.leaving, and its probe of a
process's copies in benchmarks.app): a probe that misses a dropped copy, or
a parser that misreads a stream's end, would measure nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from benchmarks.app import SECRET, CopiesSeen
from benchmarks.leaving import FULL, cookie, quantiles, sse_events, targets
from queuegate import Store
from queuegate.store import connect

from .conftest import MakeGate, client_for

pytestmark = pytest.mark.anyio


def test_quantiles_are_p50_p99_and_max_in_ms() -> None:
    assert quantiles([]) == [-1.0, -1.0, -1.0]
    assert quantiles([0.002, 0.001, 0.003]) == [2.0, 3.0, 3.0]
    hundred = [i / 1000 for i in range(1, 101)]
    assert quantiles(hundred) == [51.0, 100.0, 100.0]


def test_events_are_read_across_chunk_sizes_and_comments() -> None:
    lines = [b"2c\r\n", b"event: waiting\n", b'data: {"position": 3}\n', b"\n", b": ping\n", b"\n"]
    lines += [b"event: state\n", b'data: {"state": "none"}\n', b"\n", b"0\r\n"]
    assert sse_events(lines) == [("waiting", '{"position": 3}'), ("state", '{"state": "none"}')]


def test_a_missed_figure_never_meets_a_target() -> None:
    report = {
        "streams_not_ended_within_5s": 0,
        "stream_end_ms_max": 120.0,
        "removed_copy_dropped_ms_p50_p99_max": [5.0, 9.0, 12.0],
        "removed_copies_not_dropped": 0,
        "removed_requests_passed_after": 0,
        "flush_then_remove_copy_dropped_ms_p50_p99_max": [-1.0, -1.0, -1.0],  # none measured
        "flush_alone_copy_dropped_ms_p50_p99_max": [200.0, 600.0, 700.0],
        "flush_copies_not_dropped_within_5s": 0,
    }
    met = list(targets(report).values())
    assert met == [True, True, False, True]
    worse = {**report, "removed_requests_passed_after": 1, "stream_end_ms_max": 1001.0}
    assert list(targets(worse).values()) == [False, False, False, True]


async def test_the_probe_sees_each_copy_held_and_when_it_was_dropped(
    redis_url: str, make_gate: MakeGate
) -> None:
    probe = CopiesSeen(await make_gate(rooms=[FULL], secret_key=SECRET))  # the benchmark's cookies
    operator = Store(connect(redis_url, 5.0))
    try:
        probe.gate.store.invalidations.start()  # as the gate's lifespan does
        async with client_for(probe) as client:

            async def seen(*visitors: str) -> dict[str, Any]:
                answer = await client.get(f"/_bench/copies/{FULL.name}", params={"v": ",".join(visitors)})
                return dict(answer.json())

            for visitor in ("a", "b"):
                for _ in range(200):  # copied once the gate's subscription is up
                    answer = await client.get("/removed", headers={"Cookie": cookie(FULL, visitor)})
                    assert answer.status_code == 200
                    if (await seen(visitor))["held"][visitor]:
                        break
                    await asyncio.sleep(0.02)
            assert (await seen("a", "b"))["held"] == {"a": True, "b": True}
            sent = time.monotonic()
            await operator.leave(FULL, "a", who="test")
            for _ in range(100):
                if "a" in (await seen("a"))["dropped"]:
                    break
                await asyncio.sleep(0.01)
            answer_a = await seen("a", "b")
            assert answer_a["held"] == {"a": False, "b": True}
            assert sent <= answer_a["dropped"]["a"] <= time.monotonic()
            # A revocation of the whole room ("*") drops every copy it held.
            await operator.configure(FULL, capacity=41)
            for _ in range(100):
                if "b" in (await seen("b"))["dropped"]:
                    break
                await asyncio.sleep(0.01)
            assert (await seen("b"))["held"] == {"b": False}
            assert (await seen())["lost"] == 0
    finally:
        await operator.aclose()
