"""The estimate stays honest when people walk away (see benchmarks/eta_accuracy.py)."""

from __future__ import annotations

import pytest

from benchmarks.eta_accuracy import simulate

pytestmark = pytest.mark.anyio


async def test_estimate_within_20_percent_for_90_percent_of_those_who_stay(redis_url: str) -> None:
    result = await simulate(redis_url, visitors=800, walk_away=0.3, seed=2, rate=10, per=5.0, abandon=30.0)
    assert result["gave_up"] > 0.15 * 800  # people really walked away
    assert result["within_20_percent"] >= 0.9, result
