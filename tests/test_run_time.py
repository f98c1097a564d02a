"""Settings set at run time (the console, the back office, Store.configure)
win over the code's: which ones are, and what the code says of each, as
the scripts report them."""

from __future__ import annotations

import logging

import pytest

from queuegate import Health, Room, Store
from queuegate.checks import ConfigError
from queuegate.stats import described

from .conftest import MakeGate, lifespan_app, running

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
    assert (pinned["run_time"], pinned["controlled"]) == (["rate", "per"], "")
    await store.configure(room, pinned=None, now=T0)  # `set --auto`: the controller's again
    held = await store.stats(room, now=T0)
    assert (held["run_time"], held["controlled"]) == (["per"], "rate")
    assert held["code"]["rate"] == 10


async def test_rate_and_per_are_kept_as_one_pair(store: Store) -> None:
    await store.stats(flash(rate=2, per=1.0), now=T0)
    written = await store.configure("flash", rate=5, now=T0)
    assert written == {"rate": "5", "per": "1000"}  # the per in force, kept with it
    # Redeployed with another pair: the operator's stays whole, not 5 a minute.
    stats = await store.stats(flash(rate=3, per=60.0), now=T0 + 1)
    assert (stats["rate"], stats["per"]) == (5, 1000)
    assert stats["code"] == {"rate": 3, "per": 60_000}
    assert await store.configure("flash", per=2.0, now=T0 + 2) == {"per": "2000", "rate": "5"}
    # Resetting either resets both: the code's pair, whole.
    assert await store.configure("flash", rate=None, now=T0 + 3) == {"rate": "", "per": ""}
    stats = await store.stats("flash", now=T0 + 4)
    assert (stats["rate"], stats["per"], stats["run_time"]) == (3, 60_000, [])
    # One set, the other reset: the other at the code's value.
    await store.configure("flash", per=5.0, now=T0 + 5)
    assert await store.configure("flash", rate=7, per=None, now=T0 + 6) == {"rate": "7", "per": "60000"}
    # Other settings are not paired.
    assert await store.configure("flash", status="paused", now=T0 + 7) == {"status": "paused"}


async def test_only_a_rate_given_pins_the_admission_controller(store: Store) -> None:
    room = flash(rate=10, per=1.0, target=Health(p95_ms=300))
    await store.stats(room, now=T0)
    await store.configure(room, per=2.0, now=T0)  # the rate kept with it is still the controller's
    stats = await store.stats(room, now=T0)
    assert (stats["pinned"], stats["controlled"], stats["run_time"]) == (0, "rate", ["per"])


async def test_a_rate_given_beside_an_unpin_stays_pinned(store: Store) -> None:
    """`set --rate 5 --reset all` sends the rate and an unpin together: the
    unpin, applied after the rate, handed the operator's 5 to the
    controller at once. Only what the controller holds pins: a capacity
    set in a room whose controller holds the rate left it without one."""
    room = flash(rate=10, per=1.0, capacity=100, target=Health(p95_ms=300))
    await store.stats(room, now=T0)
    for changes in ({"rate": 5, "pinned": None}, {"pinned": None, "rate": 5}):
        await store.configure(room, pinned=None, now=T0)
        await store.configure(room, **changes, now=T0)  # type: ignore[arg-type]
        stats = await store.stats(room, now=T0)
        assert (stats["rate"], stats["pinned"], stats["controlled"]) == (5, 1, ""), changes
    await store.configure(room, rate=None, capacity=50, pinned=None, now=T0)
    stats = await store.stats(room, now=T0)
    assert (stats["rate"], stats["capacity"], stats["pinned"], stats["controlled"]) == (10, 50, 0, "rate")


async def test_a_reset_of_the_pinned_rate_gives_it_back_to_the_controller(store: Store) -> None:
    """`set --rate 5` pins the controller's rate; `set --reset rate` put the
    code's rate back and left it pinned there (the controller frozen, and
    `list` named nothing set at run time: a launch-day runbook's trial).
    The reset unpins, as the code has it: of the rate, or of `per`, which
    resets the pair; a rate given beside it pins again."""
    room = flash(rate=10, per=1.0, target=Health(p95_ms=300))
    await store.stats(room, now=T0)
    for reset in ({"rate": None}, {"per": None}, {"rate": None, "per": 2.0}):
        assert await store.configure(room, rate=5, now=T0) == {"rate": "5", "per": "1000", "pinned": "1"}
        written = await store.configure(room, **reset, now=T0)
        assert written["pinned"] == "", reset
        stats = await store.stats(room, now=T0)
        assert (stats["rate"], stats["pinned"], stats["controlled"]) == (10, 0, "rate"), reset
        await store.configure(room, per=None, now=T0)
    await store.configure(room, rate=5, now=T0)
    await store.configure(room, rate=None, now=T0)
    assert (await store.stats(room, now=T0))["run_time"] == []
    await store.configure(room, rate=5, now=T0)
    assert await store.configure(room, per=None, rate=7, now=T0) == {"per": "1000", "rate": "7"}
    stats = await store.stats(room, now=T0)
    assert (stats["pinned"], stats["pinned_setting"]) == (1, "rate")  # (the back office names it)


async def test_per_alone_leaves_the_rate_the_controller_holds(store: Store) -> None:
    """The controller's rate is not the operator's half of a pair: resetting
    `per` reset it too, and a room the controller had cut to 4 jumped back
    to the code's 10."""
    room = flash(rate=10, per=1.0, target=Health(p95_ms=300))
    await store.stats(room, now=T0)
    await store.configure(room, rate=4, now=T0)
    await store.configure(room, pinned=None, now=T0)  # 4, the controller's now
    assert await store.configure(room, per=None, now=T0 + 1) == {"per": ""}
    stats = await store.stats(room, now=T0 + 1)
    assert (stats["rate"], stats["per"], stats["controlled"]) == (4, 1000, "rate")
    assert await store.configure(room, per=2.0, now=T0 + 2) == {"per": "2000"}
    assert (await store.stats(room, now=T0 + 2))["rate"] == 4


async def test_a_target_left_at_run_time_by_a_deploy_without_one_runs_no_controller(store: Store) -> None:
    """A target set at run time while the code had one stays after a deploy
    whose code has none. No process measures the room then, and it admits
    as a room without a controller (advance.lua); the stats said its
    target, that the controller held the rate (show: "set by the admission
    controller", "no: the controller sets it"), and a rate set by hand was
    taken for a pin on it."""
    await store.stats(flash(rate=10, per=1.0, target=Health(p95_ms=300)), now=T0)
    await store.configure("flash", target_ms=500, now=T0)
    room = flash(rate=10, per=1.0)  # deployed without a target
    stats = await store.stats(room, now=T0 + 1)
    assert (stats["target_in_code"], stats["target_ms"], stats["controlled"]) == (0, 0, "")
    assert await store.configure(room, rate=5, now=T0 + 2) == {"rate": "5", "per": "1000"}  # no pin
    stats = await store.stats(room, now=T0 + 2)
    assert (stats["pinned"], stats["run_time"]) == (0, ["rate", "per", "target_ms"])


async def test_the_log_says_the_pairs_other_half_that_went_with_a_change(store: Store) -> None:
    await store.stats(flash(rate=2, per=1.0), now=T0)
    await store.configure("flash", rate=5, who="ada", now=T0)
    await store.configure("flash", per=None, who="ada", now=T0 + 1)
    reset, set_ = (entry["details"] for entry in await store.activity("flash", 2))
    assert set_ == {"rate": 5, "per": 1}
    assert reset == {"per": None, "rate": None}


async def test_a_gate_starting_logs_each_room_whose_settings_were_set_at_run_time(
    make_gate: MakeGate, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """After a deploy with new values, the operator's from before still win:
    said once per room at startup (the registration's own call, none more)."""
    await store.stats(flash(rate=2, per=1.0))
    await store.stats(Room("calm", paths=["/calm*"], rate=2))
    await store.configure("flash", rate=5, status="paused")
    rooms = [flash(rate=3, per=60.0), Room("calm", paths=["/calm*"], rate=2)]
    gate = await make_gate(lifespan_app, rooms=rooms)
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        async with running(gate):
            pass
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "queuegate: room 'flash' runs with settings set at run time, over the code's: rate 5 (code: 3), "
        "per 1 s (code: 60 s), status paused (code: open) (`queuegate set flash --reset all` goes back "
        "to the code's)"
    ]


async def test_a_gate_starting_says_when_a_deploy_left_a_room_no_limit(
    make_gate: MakeGate, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A capacity set to 0 at run time under a rate from code, then a deploy
    of a room limited by capacity alone: rate 0 and capacity 0, no limit at
    all, which the console refuses to make but a deploy cannot be refused.
    Said at startup, beside the settings set at run time."""
    await store.stats(Room("shop", paths=["/shop*"], rate=10, per=60.0))
    await store.configure("shop", capacity=0)
    gate = await make_gate(lifespan_app, rooms=[Room("shop", paths=["/shop*"], capacity=100)])
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        async with running(gate):
            pass
    said = [record.getMessage() for record in caplog.records]
    assert said[-1] == (
        "queuegate: room 'shop' lets everyone in: its rate and capacity are both 0 (no limit) with the "
        "settings set at run time over this code's"
    ), said
    assert len(said) == 2, said


async def test_stats_say_a_room_lets_everyone_in_only_while_it_is_open_with_no_limit(store: Store) -> None:
    """stats.lua's ``unlimited``, which the startup log, ``show`` and the
    back office read: an open room whose rate and capacity are both 0 (left
    by a deploy under a run-time 0), and no other."""
    await store.stats(Room("shop", paths=["/shop*"], rate=10, per=60.0))
    assert (await store.stats("shop"))["unlimited"] == 0
    await store.configure("shop", capacity=0)
    await store.stats(Room("shop", paths=["/shop*"], capacity=100))  # the deploy: its rate is 0
    assert (await store.stats("shop"))["unlimited"] == 1
    await store.configure("shop", status="paused")
    assert (await store.stats("shop"))["unlimited"] == 0  # nobody is let in while paused
    await store.configure("shop", status="open", capacity=5)
    assert (await store.stats("shop"))["unlimited"] == 0


def test_a_setting_set_at_run_time_to_the_codes_value_is_said_so() -> None:
    """It still holds over a deploy that changes the code's, so it is
    listed; "per 1 s (code: 1 s)" read as a mistake (a newcomer's trial)."""
    stats = {"run_time": ["rate", "per"], "rate": 5, "per": 1000, "code": {"rate": 3, "per": 1000}}
    assert described(stats) == "rate 5 (code: 3), per 1 s (the same as the code's)"


async def test_a_default_floor_is_said_as_the_floor_it_makes_and_follows_a_ceiling(store: Store) -> None:
    """A floor left to its default is stored as 0 and made by advance.lua
    from the pair and ceiling in force (a review): a ceiling under it was
    refused as under the floor (`--ceiling 30` on a room of 300 a minute:
    "the ceiling (30) would be below the floor (60)"), though it caps the
    default; and `show` said the code's floor was 0. A floor given is still
    checked against the ceiling."""
    room = flash(rate=300, per=60.0, target=Health(p95_ms=300))
    assert (await store.stats(room, now=T0))["floor"] == 60  # a visitor a second, in visitors a minute
    await store.configure("flash", ceiling=30, now=T0)
    stats = await store.stats("flash", now=T0)
    assert (stats["floor"], stats["ceiling"]) == (30, 30)
    await store.configure("flash", floor=5, now=T0)
    stats = await store.stats("flash", now=T0)
    assert (stats["floor"], stats["code"]["floor"]) == (5, 60)
    with pytest.raises(ConfigError, match=r"the ceiling \(30\) would be below the floor \(40\)"):
        await store.configure("flash", floor=40, now=T0)
