"""Prometheus text for every room."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queuegate import ConfigError, Health, Room, readings
from queuegate.embedded import EmbeddedServer
from queuegate.metrics import metrics_app, metrics_text
from queuegate.store import StoreError

from .conftest import MakeGate, client_for

pytestmark = pytest.mark.anyio


async def test_metrics_for_every_room(make_gate: MakeGate) -> None:
    rooms = [Room("sale", paths=["/checkout*"], rate=1, per=60), Room("t-{e}", paths=["/t/{e}"], capacity=9)]
    gate = await make_gate(rooms=rooms)
    async with client_for(gate) as a, client_for(gate) as b:
        await a.get("/checkout")
        await b.get("/checkout")
        await a.get("/t/7")
    async with client_for(gate) as c, client_for(gate) as d:
        await c.get("/checkout")
        await d.get("/checkout")
    assert await gate.rooms["sale"].drain() == 3  # b, c and d (the counters table in the docs names it)
    async with client_for(metrics_app(gate.store)) as scraper:
        response = await scraper.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = list(text_string_to_metric_families(response.text))
    samples = {
        (sample.name, sample.labels.get("room")): sample.value
        for family in families
        if family.type != "histogram"
        for sample in family.samples
    }
    assert samples[("queuegate_redis_up", None)] == 1
    assert samples[("queuegate_waiting", "sale")] == 0
    assert samples[("queuegate_drained_total", "sale")] == 3
    assert samples[("queuegate_active", "sale")] == 1
    assert samples[("queuegate_active", "t-7")] == 1
    assert samples[("queuegate_admitted_total", "sale")] == 1
    assert samples[("queuegate_capacity", "t-7")] == 9
    assert samples[("queuegate_open", "sale")] == 1
    # The wait histograms: the one admitted went straight in (a wait of 0).
    (waits,) = [family for family in families if family.name == "queuegate_wait_seconds"]
    assert waits.type == "histogram"
    histogram = {
        (s.name, s.labels["outcome"], s.labels.get("le")): s.value
        for s in waits.samples
        if s.labels["room"] == "sale"
    }
    assert histogram[("queuegate_wait_seconds_bucket", "admitted", "5.0")] == 1
    assert histogram[("queuegate_wait_seconds_bucket", "admitted", "+Inf")] == 1
    assert histogram[("queuegate_wait_seconds_count", "admitted", None)] == 1
    assert histogram[("queuegate_wait_seconds_count", "gave_up", None)] == 0
    assert samples[("queuegate_estimate_accurate_ratio", "sale")] == -1


async def test_cookies_signed_with_another_key_are_counted_for_the_gate_given(make_gate: MakeGate) -> None:
    """Processes with different secret keys send a visitor to the back of
    the line at each move: counted by the process (``Tokens.foreign``), it
    was only in the log. Each process's scrape says its own count."""
    room = Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)
    one = await make_gate(rooms=[room], secret_key="a-key-of-process-one-0123456789")
    two = await make_gate(rooms=[room], secret_key="a-key-of-process-two-0123456789")
    async with client_for(one) as visitor:
        await visitor.get("/checkout")
        cookie = {"cookie": f"{room.cookie.decode()}={visitor.cookies[room.cookie.decode()]}"}
    async with client_for(two) as moved:
        await moved.get("/checkout", headers=cookie)

    async def scraped(app: Any) -> dict[str, Any]:
        async with client_for(app) as scraper:
            text = (await scraper.get("/")).text
        return {family.name: family for family in text_string_to_metric_families(text)}

    (counted,) = (await scraped(metrics_app(two.store, gate=two)))["queuegate_foreign_cookies"].samples
    assert (counted.name, counted.labels, counted.value) == ("queuegate_foreign_cookies_total", {}, 1)
    families = await scraped(metrics_app(one.store, gate=one))
    assert families["queuegate_foreign_cookies"].type == "counter"
    assert "none of this process's secret keys" in families["queuegate_foreign_cookies"].documentation
    assert families["queuegate_foreign_cookies"].samples[0].value == 0
    # Without a gate the exporter knows no process's counts: no such metric.
    assert "queuegate_foreign_cookies" not in await scraped(metrics_app(one.store))


async def test_newcomers_the_client_limit_refused_are_counted(
    make_gate: MakeGate, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 for a new place (client_limit) left no trace an operator could
    see: behind a proxy the gate does not trust, every visitor after the
    limit's 300th a minute was turned away while the line looked calm.
    Counted in the room, by the script that refuses, and said in the log
    with the address, once a minute at most."""
    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=2)])
    statuses = []
    with caplog.at_level(logging.WARNING, logger="queuegate"):
        for _ in range(5):
            async with client_for(gate) as newcomer:  # one address, new browsers
                statuses.append((await newcomer.get("/checkout")).status_code)
    assert statuses == [200, 503, 429, 429, 429]
    said = [r.getMessage() for r in caplog.records if "client_limit" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("queuegate: room 'sale' refused a new place to 127.0.0.1, past its")
    assert "trusted_proxies" in said[0]
    async with client_for(metrics_app(gate.store)) as scraper:
        text = (await scraper.get("/")).text
    (limited,) = [f for f in text_string_to_metric_families(text) if f.name == "queuegate_limited"]
    assert limited.type == "counter"
    assert [(s.name, s.labels, s.value) for s in limited.samples] == [
        ("queuegate_limited_total", {"room": "sale"}, 3)
    ]


async def test_metrics_when_redis_is_down(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/c"], rate=1)], redis="redis://127.0.0.1:1/0")
    async with client_for(metrics_app(gate.store)) as scraper:
        response = await scraper.get("/")
    assert response.status_code == 503


async def test_a_gates_own_counts_outlive_redis(make_gate: MakeGate, own_server: EmbeddedServer) -> None:
    """The process's own counts need no Redis: a 503 would lose them
    (Prometheus reads nothing of a failed scrape), so with ``gate=`` a
    scrape answers them, without the rooms, and ``queuegate_redis_up`` 0.
    Without a gate there is nothing else to say: still 503."""
    room = Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=0)
    one = await make_gate(rooms=[room], redis=own_server.url, secret_key="a-key-of-process-one-0123456789")
    two = await make_gate(rooms=[room], redis=own_server.url, secret_key="a-key-of-process-two-0123456789")
    async with client_for(one) as visitor:
        await visitor.get("/checkout")
        cookie = {"cookie": f"{room.cookie.decode()}={visitor.cookies[room.cookie.decode()]}"}
    async with client_for(two) as moved:
        await moved.get("/checkout", headers=cookie)

    async def scraped(app: Any) -> tuple[int, dict[str, float]]:
        async with client_for(app) as scraper:
            response = await scraper.get("/")
        if response.status_code != 200:
            return response.status_code, {}
        families = text_string_to_metric_families(response.text)
        return 200, {sample.name: sample.value for family in families for sample in family.samples}

    status, up = await scraped(metrics_app(two.store, gate=two))
    assert (status, up["queuegate_redis_up"], up["queuegate_foreign_cookies_total"]) == (200, 1, 1)
    assert "queuegate_waiting" in up
    own_server.stop()
    async with client_for(two) as newcomer:
        assert (await newcomer.get("/checkout")).status_code == 503  # failed closed, counted
    assert two.counters["failed_closed"] == 1
    # Each of the process's counts under its own name (told apart by value).
    two.counters.update(failed_open=2, outage_passed=3, refused=4, bypassed=5)
    status, down = await scraped(metrics_app(two.store, gate=two))
    assert (status, down) == (
        200,
        {
            "queuegate_redis_up": 0,
            "queuegate_foreign_cookies_total": 1,
            "queuegate_redis_failed_closed_total": 1,
            "queuegate_redis_failed_open_total": 2,
            "queuegate_outage_passed_total": 3,
            "queuegate_cookies_refused_total": 4,
            "queuegate_bypassed_total": 5,
        },
    )
    assert (await scraped(metrics_app(one.store)))[0] == 503


async def test_the_grafana_dashboard_asks_only_for_metrics_the_exporter_serves(make_gate: MakeGate) -> None:
    dashboard = json.loads((Path(__file__).parent.parent / "docs" / "grafana" / "queuegate.json").read_text())
    room = Room("sale", paths=["/checkout*"], rate=1, per=60, target=Health(p95_ms=500))
    gate = await make_gate(rooms=[room])
    async with client_for(gate) as a, client_for(gate) as b:
        await a.get("/checkout")
        await b.get("/checkout")
    async with client_for(metrics_app(gate.store)) as scraper:
        text = (await scraper.get("/")).text
    served = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) >= 10
    assert all(panel["title"] for panel in dashboard["panels"])
    named = {name for query in queries for name in re.findall(r"\bqueuegate_\w+", query)}
    assert named, "no panel names a queuegate metric"
    assert named <= served, f"panels ask for metrics the exporter does not serve: {sorted(named - served)}"
    # The room variable too.
    (room,) = [v for v in dashboard["templating"]["list"] if v["name"] == "room"]
    assert set(re.findall(r"\bqueuegate_\w+", room["definition"])) <= served


async def test_the_rooms_are_read_together_a_bounded_number_at_a_time(
    make_gate: MakeGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scrape asks every room's stats: together, so that it takes a round
    trip or two and not one a room, but no more than ``AT_ONCE`` at a time
    (a keyspace of thousands of rooms). Counted around the store's own
    calls to the real server."""
    rooms = [Room(f"r{i}", paths=[f"/r{i}"], rate=1) for i in range(7)]
    gate = await make_gate(rooms=rooms)
    for i in range(7):
        async with client_for(gate) as visitor:
            await visitor.get(f"/r{i}")
    asked = gate.store.stats
    now, most = 0, 0

    async def counted(room: Any, **options: Any) -> dict[str, Any]:
        nonlocal now, most
        now += 1
        most = max(most, now)
        try:
            return await asked(room, **options)
        finally:
            now -= 1

    monkeypatch.setattr(gate.store, "stats", counted)
    assert b'queuegate_active{room="r6"} 1.0' in await metrics_text(gate.store)
    assert most == 7
    monkeypatch.setattr(readings, "AT_ONCE", 3)
    most = 0
    assert b'queuegate_active{room="r6"} 1.0' in await metrics_text(gate.store)
    assert most == 3


async def _forget_after_the_scan(store: Any, room: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The room's keys go (as its ``forget`` time or ``queuegate forget``
    would delete them) right after the scan that lists it, before its read."""
    scan = store.room_names

    async def racing() -> list[str]:
        names: list[str] = await scan()
        keys = await store.client.keys(f"{store.prefix}:{{{room}}}:*")
        if keys:
            await store.client.delete(*keys)
        return names

    monkeypatch.setattr(store, "room_names", racing)


async def test_a_room_gone_or_not_yet_used_is_left_out_not_taken_for_a_redis_outage(
    make_gate: MakeGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A room that vanished between the scan and its read, or named in
    ``rooms=`` before anybody used it, was an UnknownRoom, a StoreError:
    the scrape said ``queuegate_redis_up 0`` with no rooms (503 without
    ``gate=``). Only Redis failing is an outage. A room named is said not
    to be found; one gone since the scan is not named: left out."""
    gate = await make_gate(rooms=[Room("sale", paths=["/sale"], rate=5), Room("old", paths=["/old"], rate=5)])
    async with client_for(gate) as visitor:
        await visitor.get("/sale")
        await visitor.get("/old")
    named = (await metrics_text(gate.store, ["sale", "new"], gate=gate)).decode()
    assert "queuegate_redis_up 1.0" in named
    assert 'queuegate_active{room="sale"} 1.0' in named
    assert [line for line in named.splitlines() if 'room="new"' in line] == [
        'queuegate_room_found{room="new"} 0.0'
    ]
    await _forget_after_the_scan(gate.store, "old", monkeypatch)
    for scraped in (await metrics_text(gate.store, gate=gate), await metrics_text(gate.store)):
        text = scraped.decode()
        assert "queuegate_redis_up 1.0" in text
        assert 'queuegate_active{room="sale"} 1.0' in text
        assert 'room="old"' not in text


async def test_a_failure_s_text_stays_on_one_line_of_the_scrape(
    make_gate: MakeGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure goes into a comment of the exposition: a line break in
    it would start a line Prometheus cannot parse, losing the whole scrape."""
    gate = await make_gate(rooms=[Room("sale", paths=["/sale"], rate=5)])

    async def failing() -> list[str]:
        raise StoreError("ResponseError: first line\nsecond line")

    monkeypatch.setattr(gate.store, "room_names", failing)
    text = (await metrics_text(gate.store, gate=gate)).decode()
    assert text.startswith("# redis unavailable: ResponseError: first line second line\n")
    families = {family.name for family in text_string_to_metric_families(text)}
    assert "queuegate_redis_up" in families
    async with client_for(metrics_app(gate.store)) as scraper:
        response = await scraper.get("/")
    assert response.status_code == 503
    assert response.text == "redis unavailable: ResponseError: first line second line\n"


async def test_a_room_named_that_redis_has_not_is_said_not_dropped(
    make_gate: MakeGate, caplog: pytest.LogCaptureFixture
) -> None:
    """A misspelt name in ``rooms=`` was dropped from the scrape without a
    word: the operator scraped nothing of the room and never knew. It is
    exported as ``queuegate_room_found 0`` beside the rooms found (the
    scrape is not lost for it), and said once in the log until the room
    is found; a name no room can have is refused when the app is made."""
    caplog.set_level(logging.WARNING, logger="queuegate")
    gate = await make_gate(rooms=[Room("sale", paths=["/sale"], rate=5)])
    async with client_for(gate) as visitor:
        await visitor.get("/sale")
    app = metrics_app(gate.store, rooms=["sale", "sael"])

    async def scraped() -> dict[str, dict[str, float]]:
        async with client_for(app) as scraper:
            response = await scraper.get("/")
        assert response.status_code == 200
        rooms: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if "room" in sample.labels:
                    rooms.setdefault(sample.labels["room"], {})[sample.name] = sample.value
        return rooms

    def warned() -> int:
        return sum("Redis has no room 'sael'" in record.getMessage() for record in caplog.records)

    for _ in range(2):
        rooms = await scraped()
        assert rooms["sael"] == {"queuegate_room_found": 0}
        assert (rooms["sale"]["queuegate_room_found"], rooms["sale"]["queuegate_active"]) == (1, 1)
    assert warned() == 1
    # Found once made, and warned of again once gone.
    await gate.store.stats(Room("sael", paths=["/sael"], rate=5))
    assert (await scraped())["sael"]["queuegate_room_found"] == 1
    await gate.store.client.delete(*await gate.store.client.keys(f"{gate.store.prefix}:{{sael}}:*"))
    assert (await scraped())["sael"] == {"queuegate_room_found": 0}
    assert warned() == 2
    # metrics_text keeps nothing between calls: each one says it.
    assert b'queuegate_room_found{room="sael"} 0.0' in await metrics_text(gate.store, ["sael"])
    assert warned() == 3
    # An iterator is read once, not emptied by the first scrape.
    app = metrics_app(gate.store, rooms=iter(["sale"]))
    assert set(await scraped()) == set(await scraped()) == {"sale"}
    with pytest.raises(ConfigError, match=r"rooms must be a list of room names.*rooms=\['sale'\]"):
        metrics_app(gate.store, rooms="sale")
    with pytest.raises(ConfigError, match="'sale ' cannot be a room's name"):
        metrics_app(gate.store, rooms=["sale", "sale "])
    # Other wrong kinds: said, not a bare TypeError.
    with pytest.raises(ConfigError, match="rooms must be a list of room names, got 5"):
        metrics_app(gate.store, rooms=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"\['sale'\] is not a room's name"):
        metrics_app(gate.store, rooms=[["sale"]])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"give the rooms' names \(Room.name\), got the Room 'sale'"):
        metrics_app(gate.store, rooms=[Room("sale", paths=["/s"], rate=1)])  # type: ignore[list-item]


async def test_the_exporter_is_served_at_its_path_by_a_route(make_gate: MakeGate) -> None:
    """``Route("/metrics", metrics_app(store))`` answers ``/metrics`` itself:
    an app function there was taken for a request handler (a 500), and the
    docs' ``mount`` answered ``/metrics`` with a redirect to ``/metrics/``."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    gate = await make_gate(rooms=[Room("sale", paths=["/checkout*"], rate=1, per=60)])
    async with client_for(gate) as visitor:
        await visitor.get("/checkout")
    routed = Starlette(routes=[Route("/metrics", metrics_app(gate.store))])
    async with client_for(routed) as scraper:
        response = await scraper.get("/metrics")
    assert response.status_code == 200
    assert 'queuegate_waiting{room="sale"}' in response.text
    mounted = Starlette(routes=[Mount("/metrics", metrics_app(gate.store))])
    async with client_for(mounted) as scraper:
        assert (await scraper.get("/metrics/")).status_code == 200
