"""Every operator's change is logged where it is made (the room's activity
log, written by the script that changes the room), so that the back office
lists changes from the console and the app's code beside its own; and a
health target nothing would measure is refused, in both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import redis

from queuegate import ConfigError, Health, Room, Store
from queuegate.readings import ACTIVITY_KEEP
from queuegate.store import connect

from .test_admin import SECRET, mounted, signed_in

pytestmark = pytest.mark.anyio

FIXED = Room("fixed", paths=["/f"], rate=1, per=60.0)
ADAPTIVE = Room("adaptive", paths=["/a"], rate=5, per=1.0, target=Health(p95_ms=400))


def console(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEGATE_")}
    env["QUEUEGATE_REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "queuegate", *args], capture_output=True, text=True, env=env, timeout=30
    )


async def test_console_changes_reach_the_back_office_s_activity(store: Store, redis_url: str) -> None:
    for i in range(4):
        await store.enter(FIXED, f"v{i}")  # one in, three waiting
    assert console(redis_url, "set", "fixed", "--rate", "3", "--status", "paused").returncode == 0
    assert console(redis_url, "remove", "fixed", "v1").returncode == 0
    assert console(redis_url, "release", "fixed", "v0").returncode == 0
    assert console(redis_url, "drain", "fixed", "--yes").returncode == 0
    assert console(redis_url, "seed", "fixed", "--yes").returncode == 0
    async with signed_in(mounted(store, secret=SECRET)) as office:
        log = (await office.get("/ops/api/activity")).json()["activity"]
        room_log = (await office.get("/ops/api/rooms/fixed")).json()["activity"]
    assert [entry["action"] for entry in log] == ["reveal seed", "drain", "release", "remove", "settings"]
    assert room_log == log
    assert all(entry["who"].startswith("console (") and entry["room"] == "fixed" for entry in log)
    # per: the pair's other half, kept with the rate
    assert log[-1]["details"] == {"rate": 3, "status": "paused", "per": 60}
    assert log[1]["details"] == {"removed": 2}
    assert log[2]["details"] == {"visitor": "v0", "held_a_place": True}
    assert log[3]["details"] == {"visitor": "v1", "held_a_place": True}
    assert [entry["at"] for entry in log] == sorted((entry["at"] for entry in log), reverse=True)


async def test_the_app_s_own_changes_are_logged_and_visitors_own_are_not(store: Store) -> None:
    await store.enter(FIXED, "a")
    await store.enter(FIXED, "b")
    await store.release(FIXED, "a")  # the visitor's own: bought, leaves
    await store.leave(FIXED, "b")
    await store.configure(FIXED, capacity=4)
    await store.configure("fixed", rate=2, who="release script")
    (by_name, by_code) = await store.activity("fixed")
    assert (by_name["who"], by_name["details"]) == ("release script", {"rate": 2, "per": 60})
    assert by_code["who"] == store.actor
    assert by_code["who"].startswith("code, pid ")
    assert by_code["details"] == {"capacity": 4}


async def test_the_log_is_capped_and_forgotten_with_its_room(store: Store, redis_url: str) -> None:
    await store.enter(FIXED, "a")
    for rate in range(1, ACTIVITY_KEEP + 6):
        await store.configure(FIXED, rate=rate)
    log = await store.activity("fixed", ACTIVITY_KEEP + 10)
    assert len(log) == ACTIVITY_KEEP
    assert log[0]["details"] == {"rate": ACTIVITY_KEEP + 5, "per": 60}  # per: kept with it
    await store.configure(Room("brief", paths=["/b"], rate=1, forget=60.0), rate=2)
    with redis.Redis.from_url(redis_url) as client:
        assert 0 < client.pttl("qg:{brief}:activity") <= 60_000


async def test_a_health_target_nothing_measures_is_refused(store: Store, redis_url: str) -> None:
    await store.enter(FIXED, "a")
    await store.enter(ADAPTIVE, "b")
    with pytest.raises(ConfigError, match="no health target in code"):
        await store.configure("fixed", target_ms=300, rate=9)
    refused = console(redis_url, "set", "fixed", "--target-ms", "300")
    assert refused.returncode == 2
    assert "target=Health(p95_ms=300)" in refused.stderr
    async with signed_in(mounted(store, secret=SECRET)) as office:
        answer = await office.post("/ops/api/rooms/fixed", json={"target_ms": 300})
        assert answer.status_code == 400
        assert "no app process measures its responses" in answer.json()["error"]
        # Nothing was written, nothing logged.
        assert (await office.get("/ops/api/activity")).json()["activity"] == []
        stats = await store.stats("fixed")
        assert (stats["target_ms"], stats["rate"]) == (0, 1)
        # Off is always allowed; a room with a target in code takes a new one.
        assert (await office.post("/ops/api/rooms/fixed", json={"target_ms": 0})).status_code == 200
        tuned = await office.post("/ops/api/rooms/adaptive", json={"target_ms": 250})
        assert tuned.json()["target_ms"] == 250
    assert console(redis_url, "set", "adaptive", "--target-ms", "300").returncode == 0
    shown = json.loads(console(redis_url, "show", "adaptive", "--json").stdout)
    assert shown["target_ms"] == 300


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("max_errors", 0.05, "--max-errors"),
        ("floor", 2, "--floor"),
        ("ceiling", 50, "--ceiling"),
        ("settle", 20.0, "--settle"),
    ],
)
async def test_a_controllers_setting_on_a_room_without_one_is_refused(
    store: Store, redis_url: str, field: str, value: float, option: str
) -> None:
    """`set --floor 2` on a room without a health target in code was taken
    (printed, kept), where `--target-ms` and `--auto` are refused, and
    `show` did not list it: no controller reads it there. Refused the same
    way; its removal is not, and a room with a target in code takes it."""
    await store.enter(FIXED, "a")
    await store.enter(ADAPTIVE, "b")
    setting: dict[str, Any] = {field: value}
    with pytest.raises(ConfigError, match="no health target in code"):
        await store.configure("fixed", **setting)
    refused = console(redis_url, "set", "fixed", option, str(value))
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "no health target in code" in refused.stderr
    async with signed_in(mounted(store, secret=SECRET)) as office:
        answer = await office.post("/ops/api/rooms/fixed", json={field: value})
        assert answer.status_code == 400
        assert (await office.get("/ops/api/activity")).json()["activity"] == []
    assert (await store.stats("fixed"))["run_time"] == []
    assert console(redis_url, "set", "fixed", "--reset", field).returncode == 0
    assert console(redis_url, "set", "adaptive", option, str(value)).returncode == 0
    assert json.loads(console(redis_url, "show", "adaptive", "--json").stdout)[field] == value


async def test_giving_the_rate_back_to_a_controller_a_room_lacks_is_refused(
    store: Store, redis_url: str
) -> None:
    """`set --auto` on a room without a health target in code printed
    `pinned=auto` and changed nothing, where `--target-ms` is refused:
    refused the same way, by the same script; `--reset all` still goes
    back to the code's there."""
    await store.enter(FIXED, "a")
    await store.enter(ADAPTIVE, "b")
    with pytest.raises(ConfigError, match="no health target in code"):
        await store.configure("fixed", pinned=None)
    refused = console(redis_url, "set", "fixed", "--auto")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "no health target in code" in refused.stderr
    assert "target=Health(p95_ms=300)" in refused.stderr
    async with signed_in(mounted(store, secret=SECRET)) as office:
        answer = await office.post("/ops/api/rooms/fixed", json={"pinned": None, "status": "paused"})
        assert answer.status_code == 400
        assert (await office.get("/ops/api/activity")).json()["activity"] == []
    assert (await store.stats("fixed"))["status"] == "open"
    reset = console(redis_url, "set", "fixed", "--status", "paused", "--reset", "all")
    assert reset.returncode == 0, reset.stderr
    assert console(redis_url, "set", "fixed", "--reset", "all").returncode == 0
    assert (await store.stats("fixed"))["run_time"] == []
    assert console(redis_url, "set", "adaptive", "--auto").stdout == "adaptive: pinned=auto\n"


async def test_a_pin_left_by_a_deploy_that_had_a_target_can_still_be_removed(
    store: Store, redis_url: str
) -> None:
    """A rate pinned under a target stays pinned when a deploy drops the
    target; the unpin was refused there, so `--reset all` said everything
    was reset and left the pin, `--auto` and the back office were refused,
    and a later deploy with a target came back pinned. An unpin that
    removes a pin goes through; one with nothing to remove is refused.

    Each deploy is its defaults written (``stats``), not a visitor's entry:
    an admission made this one store tick the room with that Room for good
    (as a process ticks with its own), and a tick between a deploy and the
    next call put the other deploy's defaults back (about one run in two)."""
    await store.stats(ADAPTIVE)
    await store.configure("adaptive", rate=20)  # pins the controller's rate
    dropped = Room("adaptive", paths=["/a"], rate=5, per=1.0)  # the next deploy: no target
    await store.stats(dropped)
    assert (await store.stats("adaptive"))["pinned"] == 1
    reset = console(redis_url, "set", "adaptive", "--reset", "all")
    assert reset.returncode == 0, reset.stderr
    stats = await store.stats("adaptive")
    assert (stats["pinned"], stats["run_time"]) == (0, [])
    refused = console(redis_url, "set", "adaptive", "--auto")  # nothing pinned now
    assert (refused.returncode, "no health target in code" in refused.stderr) == (2, True)
    await store.stats(ADAPTIVE)
    await store.configure("adaptive", rate=20)
    await store.stats(dropped)
    assert console(redis_url, "set", "adaptive", "--auto").stdout == "adaptive: pinned=auto\n"
    await store.stats(ADAPTIVE)
    await store.configure("adaptive", rate=20)
    await store.stats(dropped)
    async with signed_in(mounted(store, secret=SECRET)) as office:
        answer = await office.post("/ops/api/rooms/adaptive", json={"pinned": None})
        assert answer.status_code == 200, answer.text
    assert (await store.stats(ADAPTIVE))["pinned"] == 0  # a deploy with a target: the controller's


async def test_a_room_s_log_survives_another_store(redis_url: str) -> None:
    # The log is in Redis, not in the process that wrote it.
    first = Store(connect(redis_url, 5.0), actor="ops bot")
    try:
        await first.enter(FIXED, "a")
        await first.drain(FIXED)
    finally:
        await first.aclose()
    second = Store(connect(redis_url, 5.0))
    try:
        (entry,) = await second.activity("fixed")
    finally:
        await second.aclose()
    assert (entry["who"], entry["action"], entry["details"]) == ("ops bot", "drain", {"removed": 0})


async def test_a_change_leaving_neither_rate_nor_capacity_is_refused(store: Store, redis_url: str) -> None:
    """`set --rate 0` on a room without a capacity was taken (rate 0 is no
    limit) and every newcomer walked in, where the code refuses such a room:
    refused the same way, from the console and the back office, with the
    statuses that do what the operator may have meant. A rate of 0 beside
    a capacity is a room limited by its capacity, and is taken."""
    await store.enter(FIXED, "a")
    with pytest.raises(ConfigError, match=r"with both 0 \(no limit\) the room would let everyone in"):
        await store.configure("fixed", rate=0)
    refused = console(redis_url, "set", "fixed", "--rate", "0")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "set the status to paused" in refused.stderr
    async with signed_in(mounted(store, secret=SECRET)) as office:
        answer = await office.post("/ops/api/rooms/fixed", json={"rate": 0})
        assert answer.status_code == 400
        assert "would let everyone in" in answer.json()["error"]
        assert (await office.get("/ops/api/activity")).json()["activity"] == []
    stats = await store.stats("fixed")
    assert (stats["rate"], stats["capacity"], stats["run_time"]) == (1, 0, [])
    # Nobody new got in meanwhile: the line is as it was.
    assert (await store.enter(FIXED, "b")).state == "waiting"
    # With a capacity, in the same call or already in force, rate 0 is taken;
    # then a capacity of 0 is refused, and a reset of the rate to the code's
    # with it is not.
    assert console(redis_url, "set", "fixed", "--rate", "0", "--capacity", "5").returncode == 0
    assert console(redis_url, "set", "fixed", "--capacity", "0").returncode == 2
    assert console(redis_url, "set", "fixed", "--capacity", "0", "--reset", "rate").returncode == 0
    shown = json.loads(console(redis_url, "show", "fixed", "--json").stdout)
    assert (shown["rate"], shown["capacity"]) == (1, 0)


CAPACITY_ONLY = Room("cap", paths=["/c"], capacity=100)
HELD_RATE = Room("held", paths=["/h"], rate=5, per=1.0, target=Health(p95_ms=400))
HELD_CAPACITY = Room("heldcap", paths=["/k"], capacity=10, target=Health(p95_ms=400))


@pytest.mark.parametrize(
    ("room", "before", "change", "refused"),
    [
        # A rate and per set at run time over a capacity-only room's code,
        # whose capacity an operator set to 0: resetting per resets the rate
        # with it (the pair), to the code's 0.
        (CAPACITY_ONLY, {"rate": 50, "per": 60.0, "capacity": 0}, {"per": None}, True),
        (CAPACITY_ONLY, {"rate": 50, "per": 60.0, "capacity": 0}, {"per": 30.0}, False),
        (CAPACITY_ONLY, {"rate": 50, "per": 60.0}, {"reset_all": True}, False),
        (CAPACITY_ONLY, {}, {"reset_all": True, "capacity": 0}, True),
        (CAPACITY_ONLY, {}, {"rate": None}, False),
        (FIXED, {"capacity": 10}, {"rate": 0}, False),
        (FIXED, {"rate": 0, "capacity": 10}, {"capacity": None}, True),
        # The controller holds the capacity: a rate of 0 leaves it; a
        # capacity of 0 does not.
        (HELD_CAPACITY, {}, {"rate": 0}, False),
        (HELD_CAPACITY, {}, {"capacity": 0}, True),
        # The controller holds the rate: per alone leaves it.
        (HELD_RATE, {}, {"rate": 0}, True),
        (HELD_RATE, {}, {"rate": 0, "capacity": 4}, False),
        (HELD_RATE, {"capacity": 0}, {"per": None}, False),
        (HELD_RATE, {"rate": 3}, {"rate": 0, "pinned": None}, True),
    ],
)
async def test_the_rate_and_capacity_rule_follows_the_pair_and_the_controller(
    store: Store, room: Room, before: dict[str, Any], change: dict[str, Any], refused: bool
) -> None:
    """The refusal of a change that leaves neither a rate nor a capacity
    reads the room as the change leaves it: `--reset per` resets the rate
    with it (it let a room at capacity 0 through to rate 0), a rate the
    controller holds stays its own, a pin removed in the same call counts."""
    await store.enter(room, "a")
    if before:
        await store.configure(room.name, **before)
    if refused:
        with pytest.raises(ConfigError, match="would let everyone in"):
            await store.configure(room.name, **change)
    else:
        await store.configure(room.name, **change)
    stats = await store.stats(room.name)
    assert stats["rate"] > 0 or stats["capacity"] > 0, stats


async def test_a_room_already_without_rate_or_capacity_can_still_be_paused(
    store: Store, redis_url: str
) -> None:
    """A deploy can leave a room at rate 0 and capacity 0 under a run-time
    value (code rate=10, `set --capacity 0`, then a deploy of a
    capacity-only room), where configure cannot refuse it. Refusing every
    change of such a room refused the pause its own message advised; only
    a change of the rate, per or capacity that makes a room so is refused.
    `show` says what the room does, under its title."""
    await store.enter(Room("shop", paths=["/s"], rate=10, per=60.0), "a")
    await store.configure("shop", capacity=0)
    await store.enter(Room("shop", paths=["/s"], capacity=100), "b")  # the deploy
    stats = await store.stats("shop")
    assert (stats["rate"], stats["capacity"]) == (0, 0)
    said = console(redis_url, "show", "shop").stdout.splitlines()[1]
    assert said == (
        "lets everyone in: rate and capacity are both 0 (no limit); "
        "`queuegate set shop --reset all` goes back to the code's"
    )
    paused = console(redis_url, "set", "shop", "--status", "paused")
    assert paused.returncode == 0, paused.stderr
    assert console(redis_url, "set", "shop", "--client-limit", "10").returncode == 0
    assert console(redis_url, "set", "shop", "--reset", "capacity").returncode == 0
    stats = await store.stats("shop")
    assert (stats["status"], stats["capacity"]) == ("paused", 100)


BOUNDED = Room("bounded", paths=["/b"], rate=5, per=1.0, target=Health(p95_ms=400, floor=2, ceiling=20))


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"floor": 50, "ceiling": 5}, True),
        ({"floor": 50}, True),  # over the code's ceiling of 20
        ({"ceiling": 1}, True),  # under the code's floor of 2
        ({"floor": 50, "ceiling": 0}, False),  # 0: no ceiling
        ({"floor": 50, "ceiling": 60}, False),
        ({"ceiling": 2}, False),
        ({"floor": None, "ceiling": 1}, True),  # back to the code's floor of 2, over 1
    ],
)
async def test_a_floor_over_the_ceiling_is_refused_as_in_code(
    store: Store, redis_url: str, change: dict[str, Any], refused: bool
) -> None:
    """`set --floor 50 --ceiling 5` was taken, where Health(floor=50,
    ceiling=5) is refused in code: the ceiling wins, and the controller held
    the room under it, not at the floor that keeps the line moving. The
    bounds are read as the change leaves them, the code's where not set."""
    await store.enter(BOUNDED, "a")
    if refused:
        with pytest.raises(
            ConfigError, match=r"floor and ceiling: the ceiling \(\d+\) would be below the floor"
        ):
            await store.configure("bounded", **change)
        assert (await store.stats("bounded"))["run_time"] == []
    else:
        await store.configure("bounded", **change)


async def test_a_reset_of_every_setting_logs_what_it_reset(store: Store) -> None:
    """It logged all nineteen settings as reset, whatever was set; then,
    with a value given beside it, no sign at all that a reset ran."""
    await store.enter(FIXED, "a")
    await store.configure("fixed", reset_all=True, who="ada")
    await store.configure("fixed", reset_all=True, status="paused", who="ada")
    await store.configure("fixed", reset_all=True, who="ada")
    details = [entry["details"] for entry in await store.activity("fixed")]
    assert details == [{"status": None}, {"status": "paused", "all": None}, {"all": None}]
