"""Settings set at run time (the console, the back office, Store.configure)
win over the code's: which ones are, and what the code says of each, as
the scripts report them."""

from __future__ import annotations

import pytest

from queuegate import Health, Room, Store

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000  # ms


def flash(**settings: object) -> Room:
    return Room("flash", paths=["/flash*"], **settings)  # type: ignore[arg-type]


async def test_stats_name_each_setting_set_at_run_time_with_the_codes_value(store: Store) -> None:
    await store.stats(flash(rate=2, per=1.0), now=T0)
    assert (await store.stats("flash", now=T0))["run_time"] == []
    await store.configure("flash", status="paused", session=600.0, now=T0)
    # Redeployed with other values: the code's are what it says now.
    stats = await store.stats(flash(rate=3, per=60.0, session=900.0), now=T0 + 1)
    assert stats["run_time"] == ["session", "status"]
    assert stats["code"] == {"session": 900_000, "status": "open"}
    assert (stats["session"], stats["status"], stats["rate"]) == (600_000, "paused", 3)
    assert stats["controlled"] == ""
    # The console, which sends no values of its own, reads the code's as stored.
    assert (await store.stats("flash", now=T0 + 2))["code"] == stats["code"]


async def test_the_value_the_admission_controller_holds_is_not_the_operators(store: Store) -> None:
    room = flash(rate=10, per=1.0, target=Health(p95_ms=300))
    await store.stats(room, now=T0)
    await store.configure(room, rate=4, now=T0)  # pinned: the operator's
    pinned = await store.stats(room, now=T0)
    assert (pinned["run_time"], pinned["controlled"]) == (["rate"], "")
    await store.configure(room, pinned=None, now=T0)  # `set --auto`: the controller's again
    held = await store.stats(room, now=T0)
    assert (held["run_time"], held["controlled"]) == ([], "rate")
    assert held["code"]["rate"] == 10
