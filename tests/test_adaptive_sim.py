"""The adaptive benchmark's simulated twin (benchmarks.adaptive_sim): its
model of the pool and the visitors gives the answers queueing theory
does, so that what it says of the controller can be trusted."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.adaptive import POOL_TIMEOUT_S, TARGET_MS, WORK_MS, p95_per_second, phase_figures
from benchmarks.adaptive_sim import climb, simulate

pytestmark = pytest.mark.anyio


async def test_under_capacity_every_visitor_buys_at_the_base_latency(redis_url: str) -> None:
    """8 places of 250 ms serve 32 requests (10.7 visitors) a second; at 6 a
    second most requests find a place at once, none fails, and every
    admitted visitor buys."""
    record = await simulate(redis_url, [8], 30, seed=1, fixed=[6])
    assert set(record.rates) == {6}
    latencies = [ms for _, ms in record.served]
    assert statistics.median(latencies) == pytest.approx(WORK_MS)
    assert max(latencies) < POOL_TIMEOUT_S * 1000
    assert max(p95_per_second(record.served, 0, 30)) < TARGET_MS
    figures = phase_figures(record, 0, 30, warm=10)
    assert figures["goodput_per_s"] == pytest.approx(6, abs=0.5)


async def test_over_capacity_a_queue_runs_away_and_requests_fail(redis_url: str) -> None:
    """At 16 a second into the same pool (48 requests a second for 32), the
    wait grows until requests fail after POOL_TIMEOUT_S, and purchases fall
    under what the pool could serve."""
    record = await simulate(redis_url, [8], 30, seed=1, fixed=[16])
    late = p95_per_second(record.served, 20, 30)
    assert min(late) > TARGET_MS
    failed = [ms for _, ms in record.served if ms == POOL_TIMEOUT_S * 1000]
    assert len(failed) > 10
    assert max(ms for _, ms in record.served) <= POOL_TIMEOUT_S * 1000 + WORK_MS
    assert phase_figures(record, 0, 30, warm=10)["goodput_per_s"] < 32 / 3


async def test_the_same_seed_gives_the_same_run(redis_url: str) -> None:
    first = await simulate(redis_url, [8, 3], 15, seed=4)
    second = await simulate(redis_url, [8, 3], 15, seed=4)
    assert first.rates == second.rates
    assert first.purchases == second.purchases


async def test_the_controller_follows_the_simulated_pool(redis_url: str) -> None:
    """The adaptive room, from 5 a second, climbs towards what 12 places
    serve (16 visitors a second), and comes down when they become 3."""
    record = await simulate(redis_url, [12, 3], 60, seed=2)
    assert max(record.rates[:60]) >= 12, record.rates
    assert statistics.median(record.rates[90:]) <= 5, record.rates


def test_the_fastest_climb_falls_at_once_and_doubles_each_step() -> None:
    """The bound the law's pace sets: a fall taken at once, a rise doubled
    every half round trip, from the rate before."""
    assert climb([10, 3, 16], 5, 7, 3) == [
        *[5, 5, 5, 10, 10, 10, 10],
        *[3, 3, 3, 3, 3, 3, 3],
        *[3, 3, 3, 6, 6, 6, 12],
    ]


async def test_a_room_given_a_rate_each_second_admits_at_it(redis_url: str) -> None:
    rates = climb([8, 2], 2, 6, 2)
    record = await simulate(redis_url, [8, 3], 6, seed=3, each_second=rates)
    assert record.rates == rates
