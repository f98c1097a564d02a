"""The back office (queuegate.admin): who may use it, proof that a change
came from its page, every change logged, and what it shows."""

from __future__ import annotations

import html
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from queuegate import Room, Store, admin
from queuegate.admin import activity
from queuegate.store import connect

from .conftest import client_for
from .servers.proxies import DelayingProxy
from .test_metrics import _forget_after_the_scan

pytestmark = pytest.mark.anyio

SECRET = "a-back-office-secret"
ROOM = Room("sale", paths=["/sale"], rate=1, per=60.0, method="random")


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    store = Store(connect(redis_url, 5.0))
    for i in range(4):
        await store.enter(ROOM, f"v{i}")  # one in, three waiting
    yield store
    await store.aclose()


def mounted(store: Store, **options: object) -> Starlette:
    """An app of the integrator's with the back office at /ops."""
    return Starlette(routes=[Mount("/ops", admin.app(store, **options))])  # type: ignore[arg-type]


@asynccontextmanager
async def signed_in(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(app) as client:
        response = await client.post(
            "/ops/login", data={"secret": SECRET}, headers={"origin": "https://shop.test"}
        )
        assert response.status_code == 303
        page = await client.get("/ops/")
        assert page.status_code == 200
        client.headers["x-csrf-token"] = client.cookies["queuegate_admin_csrf"]
        yield client


async def test_without_auth_or_secret_everything_is_refused(store: Store) -> None:
    async with client_for(mounted(store)) as client:
        page = await client.get("/ops/")
        assert page.status_code == 403
        assert "not configured" in page.text
        for method, path in [
            ("GET", "/ops/api/rooms"),
            ("GET", "/ops/api/rooms/sale"),
            ("GET", "/ops/api/activity"),
        ]:
            assert (await client.request(method, path)).status_code == 403
        refused = await client.post("/ops/api/rooms/sale", json={"rate": 50})
        assert refused.status_code == 403
        assert "auth= or secret=" in refused.json()["error"]
        assert (await client.post("/ops/login", data={"secret": SECRET})).status_code == 403
        # Its static files too (the README says every request), and any
        # other path or method.
        for method, path in [
            ("GET", "/ops/static/admin.js"),
            ("GET", "/ops/static/uPlot.iife.min.js"),
            ("HEAD", "/ops/static/admin.css"),
            ("GET", "/ops/login"),
            ("GET", "/ops/anything/else"),
            ("DELETE", "/ops/api/rooms/sale"),
        ]:
            answer = await client.request(method, path)
            assert answer.status_code == 403, (method, path)
            if method != "HEAD":
                assert "auth= or secret=" in answer.json()["error"], (method, path)
    assert (await store.stats("sale"))["rate"] == 1
    with pytest.raises(ValueError, match="at least 12"):
        admin.app(store, secret="short")


async def test_a_name_typed_at_sign_in_is_who_the_activity_log_names(store: Store) -> None:
    """Under one shared secret every change was logged as "admin": on a
    launch day with several operators, nobody could tell who paused the
    room (a newcomer's trial). A name typed at sign-in (optional, printable,
    40 characters at most, marked as typed there) is who the log names;
    none is "admin"."""
    app = mounted(store, secret=SECRET)
    cases = (
        ("  Ada\x00  Lovelace\n", "Ada Lovelace (back office)"),
        ("", "admin"),
        ("x" * 99, "x" * 40 + " (back office)"),
        # Nothing that passes for another origin or another field of the log.
        ("console (root@ops-1)", "console root@ops-1 (back office)"),
        ("x · sale · settings", "x sale settings (back office)"),
        ("<i>B</i>&", "iB/i& (back office)"),  # (escaped on the page)
    )
    for typed, logged in cases:
        async with client_for(app) as client:
            response = await client.post(
                "/ops/login", data={"secret": SECRET, "name": typed}, headers={"origin": "https://shop.test"}
            )
            assert response.status_code == 303
            page = await client.get("/ops/")
            assert f"signed in as <b>{html.escape(logged)}</b>" in page.text
            client.headers["x-csrf-token"] = client.cookies["queuegate_admin_csrf"]
            assert (await client.post("/ops/api/rooms/sale", json={"rate": 2})).status_code == 200
        assert (await store.activity("sale"))[0]["who"] == logged


async def test_the_secret_signs_in_and_a_wrong_one_does_not(store: Store) -> None:
    app = mounted(store, secret=SECRET)
    async with client_for(app) as stranger:
        assert (await stranger.get("/ops/")).headers["location"].endswith("/ops/login")
        assert (await stranger.get("/ops/api/rooms")).status_code == 401
        wrong = await stranger.post("/ops/login", data={"secret": "not-the-secret"})
        assert wrong.status_code == 401
        assert "not the back office's secret" in wrong.text
        assert 'value=""' in wrong.text
        # The name typed is kept for the next try, escaped (it was cleared:
        # an operator's review); only the secret was wrong.
        named = await stranger.post("/ops/login", data={"secret": "nope", "name": 'Ada "><script>'})
        assert 'value="Ada &quot;&gt;&lt;script&gt;"' in named.text
        assert "<script>" not in named.text
        # A sign-in posted from another site is refused.
        elsewhere = await stranger.post(
            "/ops/login", data={"secret": SECRET}, headers={"origin": "https://evil.test"}
        )
        assert elsewhere.status_code == 403
        # A forged session cookie is nobody.
        stranger.cookies.set("queuegate_admin", "admin.forged.signature", path="/ops/")
        assert (await stranger.get("/ops/api/rooms")).status_code == 401
    async with signed_in(app) as client:
        page = await client.get("/ops/")
        assert "signed in as <b>admin</b>" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
        rooms = (await client.get("/ops/api/rooms")).json()
        (room,) = rooms["rooms"]
        assert (room["room"], room["waiting"], room["active"]) == ("sale", 3, 1)
        assert room["waits"]["admitted_p50_ms"] is not None
        signed_out = await client.post("/ops/logout", headers={"origin": "https://shop.test"})
        assert signed_out.status_code == 303
        assert (await client.get("/ops/api/rooms")).status_code == 401
    # A script with the secret as a bearer token needs no page and no CSRF token.
    async with client_for(app) as script:
        script.headers["authorization"] = f"Bearer {SECRET}"
        assert (await script.post("/ops/api/rooms/sale", json={"rate": 3})).status_code == 200
    assert (await store.stats("sale"))["rate"] == 3


async def test_someone_the_app_s_auth_refuses_is_told_how_to_sign_in(store: Store) -> None:
    """The page said only "Not signed in": now what to do, the integrator's
    words when given."""
    async with client_for(mounted(store, auth=lambda request: None)) as stranger:
        page = await stranger.get("/ops/")
        assert page.status_code == 401
        assert "Sign in through the app" in page.text
        assert 'href="/ops/static/admin.css"' in page.text
    told = mounted(store, auth=lambda request: None, sign_in="Open <the> link in the runbook.")
    async with client_for(told) as stranger:
        page = await stranger.get("/ops/")
        assert page.status_code == 401
        assert "Open &lt;the&gt; link in the runbook." in page.text


async def test_changes_need_the_page_s_csrf_token_and_origin(store: Store) -> None:
    async with signed_in(mounted(store, secret=SECRET)) as client:
        token = client.headers.pop("x-csrf-token")
        missing = await client.post("/ops/api/rooms/sale", json={"rate": 50})
        assert missing.status_code == 403
        assert "CSRF" in missing.json()["error"]
        wrong = await client.post("/ops/api/rooms/sale", json={"rate": 50}, headers={"x-csrf-token": "guess"})
        assert wrong.status_code == 403
        other_site = await client.post(
            "/ops/api/rooms/sale",
            json={"rate": 50},
            headers={"x-csrf-token": token, "origin": "https://evil.test"},
        )
        assert other_site.status_code == 403
        # A form post (what another site's page can send without asking) is not a change.
        form = await client.post("/ops/api/rooms/sale", data={"rate": "50"}, headers={"x-csrf-token": token})
        assert form.status_code == 400
        assert (await store.stats("sale"))["rate"] == 1
        ok = await client.post(
            "/ops/api/rooms/sale",
            json={"rate": 50},
            headers={"x-csrf-token": token, "origin": "https://shop.test"},
        )
        assert ok.status_code == 200
        assert ok.json()["rate"] == 50


async def test_every_change_is_logged_with_who_and_what(store: Store) -> None:
    async def auth(request: Request) -> str | None:
        return request.headers.get("x-user")  # the integrator's own sign-in

    app = mounted(store, auth=auth)
    async with client_for(app) as nobody:
        assert (await nobody.get("/ops/")).status_code == 401
        assert (await nobody.get("/ops/login")).status_code == 404  # the app's own sign-in is used
    async with client_for(app) as client:
        client.headers["x-user"] = "ada"
        await client.get("/ops/")
        client.headers["x-csrf-token"] = client.cookies["queuegate_admin_csrf"]
        visitors = (await client.get("/ops/api/rooms/sale")).json()["visitors"]
        waiting = [v for v, _ in visitors["waiting"]]
        (active,) = [v for v, _ in visitors["active"]]
        assert len(waiting) == 3
        assert (
            await client.post("/ops/api/rooms/sale", json={"capacity": 5, "status": "paused"})
        ).status_code == 200
        assert (await client.post("/ops/api/rooms/sale/release", json={"visitor": active})).json()[
            "held_a_place"
        ]
        assert (await client.post("/ops/api/rooms/sale/remove", json={"visitor": waiting[0]})).json()[
            "held_a_place"
        ]
        assert (await client.post("/ops/api/rooms/sale/drain", json={})).json()["removed"] == 2
        revealed = (await client.post("/ops/api/rooms/sale/seed", json={})).json()
        assert revealed["seed"]
        assert len(revealed["seed_sha256"]) == 64
        assert (await client.post("/ops/api/rooms/sale/jump", json={})).status_code == 404
        assert (await client.post("/ops/api/rooms/sale/release", json={"visitor": ""})).status_code == 400
        assert (await client.post("/ops/api/rooms/sale", json={"rate": -1})).status_code == 400
        # The settings the page's form gained have the API's bounds.
        for wrong in ({"max_step": 0}, {"sliding": "yes"}, {"forget": -1}):
            refused = await client.post("/ops/api/rooms/sale", json=wrong)
            assert refused.status_code == 400, wrong
            assert next(iter(wrong)) in refused.json()["error"]
        assert (await client.post("/ops/api/rooms/sale", json={"colour": "red"})).status_code == 400
        unknown = await client.post("/ops/api/rooms/nope", json={"rate": 1})
        assert unknown.status_code == 404
        said = f"no room named 'nope' under the key prefix {store.prefix!r} has been used yet"
        assert unknown.json()["error"] == said
        gone = await client.post("/ops/api/rooms/nope/remove", json={"visitor": "v1"})
        assert gone.status_code == 404
        assert gone.json()["error"].startswith(f"{said} (or its data was lost)")
        huge = await client.post("/ops/api/rooms/sale", json={"rate": 1, "pad": "x" * 20_000})
        assert huge.status_code == 400
        assert "KiB" in huge.json()["error"]
        log = (await client.get("/ops/api/activity")).json()["activity"]
        assert [entry["action"] for entry in log] == ["reveal seed", "drain", "remove", "release", "settings"]
        assert {entry["who"] for entry in log} == {"ada"}
        assert log[-1]["details"] == {"capacity": 5, "status": "paused"}
        assert log[1]["details"] == {"removed": 2}
        detail = (await client.get("/ops/api/rooms/sale")).json()
        assert [entry["action"] for entry in detail["activity"]][:2] == ["reveal seed", "drain"]
    stats = await store.stats("sale")
    assert (stats["capacity"], stats["status"], stats["waiting"], stats["released"]) == (5, "paused", 0, 1)


async def test_a_change_that_may_flood_or_starve_the_room_is_made_and_said(store: Store) -> None:
    # One in (a session of an hour), three waiting, one a minute.
    async with signed_in(mounted(store, secret=SECRET)) as client:
        calm = await client.post("/ops/api/rooms/sale", json={"rate": 2})
        assert (calm.status_code, calm.json()["warnings"]) == (200, [])
        said = (await client.post("/ops/api/rooms/sale", json={"rate": 60, "session": 2})).json()
        assert (said["rate"], said["session"]) == (60, 2000)  # made
        assert said["warnings"] == [
            "rate 60 per 60 s lets in 30 times as many a second as before (2 per 60 s); "
            "the 3 visitors waiting can all be in at the next refill",
            "session 2 s: each visitor admitted from now on must queue again 2 s after coming in",
        ]


async def test_an_abandon_under_3_s_is_refused_with_why(store: Store) -> None:
    async with signed_in(mounted(store, secret=SECRET)) as client:
        refused = await client.post("/ops/api/rooms/sale", json={"abandon": 1, "status": "paused"})
        assert refused.status_code == 400
        assert refused.json()["error"].startswith("abandon must be 0 (never skip) or at least 3 s: ")
    stats = await store.stats("sale")
    assert (stats["abandon"], stats["status"]) == (300_000, "open")  # nothing changed


async def test_a_change_made_and_not_read_after_says_so_and_is_no_failure(
    server_url: str, store: Store
) -> None:
    """The look after a change, for what it risks, can fail once the change
    is made; the answer is then the change as made, with its risks unknown,
    not an error (after which an operator might make it again), in the back
    office's words: it said "check it with show", a console command. Redis
    goes silent right after the change here, behind a proxy (as the
    console's test does)."""
    proxy = DelayingProxy(int(server_url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    office = Store(connect(f"redis://127.0.0.1:{proxy.port}/0", 0.5), timeout=0.5)
    configure = office.configure

    async def then_silent(*given: Any, **changes: Any) -> dict[str, str]:
        written = await configure(*given, **changes)
        proxy.flowing.clear()  # a black hole from now on
        return written

    office.configure = then_silent  # type: ignore[method-assign]
    try:
        async with signed_in(mounted(office, secret=SECRET)) as client:
            said = await client.post("/ops/api/rooms/sale", json={"rate": 3})
    finally:
        await proxy.close()
        await office.aclose()
    assert said.status_code == 200, said.text
    assert said.json() == {
        "room": "sale",
        "warnings": [
            "the room could not be read after the change to say what it risks: "
            "check its figures once they can be read again"
        ],
    }
    assert (await store.stats("sale"))["rate"] == 3  # made


async def test_reset_all_sets_every_setting_back_in_one_call(store: Store) -> None:
    async with signed_in(mounted(store, secret=SECRET)) as client:
        await client.post("/ops/api/rooms/sale", json={"rate": 3, "session": 90})
        assert (await store.stats("sale"))["run_time"] == ["rate", "per", "session"]
        reset = await client.post("/ops/api/rooms/sale", json={"reset_all": True})
        assert (reset.status_code, reset.json()["run_time"], reset.json()["rate"]) == (200, [], ROOM.rate)
        kept = (await client.post("/ops/api/rooms/sale", json={"reset_all": True, "status": "paused"})).json()
        assert (kept["run_time"], kept["status"]) == (["status"], "paused")
        wrong = await client.post("/ops/api/rooms/sale", json={"reset_all": "yes"})
        assert (wrong.status_code, wrong.json()["error"]) == (400, "reset_all must be true or false")


async def test_a_room_named_dash_is_named_in_the_activity_list(store: Store) -> None:
    """The room name "-" is legal, and it was also what marked an entry of no
    one room (a run of virtual visitors): the page showed that room's
    changes without its name. An entry of no one room is of room null,
    those written with "-" before too."""
    await store.enter(Room("-", paths=["/d"], rate=1), "v")
    await store.configure("-", rate=3, who="ada")
    older = {"at": store.redis_now_ms(), "who": "carol", "room": "-", "action": "virtual visitors"}
    await store.client.lpush(f"{store.prefix}:admin:activity", json.dumps({**older, "details": {}}))
    await activity.record(store, "bob", "virtual visitors", {"visitors": 3})
    async with signed_in(mounted(store, secret=SECRET)) as client:
        log = (await client.get("/ops/api/activity")).json()["activity"]
        detail = (await client.get("/ops/api/rooms/-")).json()
    assert {entry["who"]: entry["room"] for entry in log} == {"ada": "-", "bob": None, "carol": None}
    assert [(entry["who"], entry["room"]) for entry in detail["activity"]] == [("ada", "-")]


async def test_the_room_s_figures_and_the_chart_s_library_are_served(store: Store) -> None:
    async with signed_in(mounted(store, secret=SECRET)) as client:
        detail = (await client.get("/ops/api/rooms/sale", params={"minutes": 60})).json()
        assert detail["stats"]["waiting"] == 3
        assert detail["analytics"]["minutes"][-1]["current"]
        assert detail["analytics"]["minutes"][-1]["joined"] == 3
        assert detail["analytics"]["waits"]["admitted"]["count"] == 1
        assert (await client.get("/ops/api/rooms/sale", params={"minutes": "lots"})).status_code == 400
        uplot = await client.get("/ops/static/uPlot.iife.min.js")
        assert uplot.status_code == 200
        assert "uPlot" in uplot.text
        assert (await client.get("/ops/static/admin.js")).status_code == 200
        page = (await client.get("/ops/")).text
        assert 'src="/ops/static/uPlot.iife.min.js"' in page  # no CDN: works offline


async def test_redis_away_is_a_clear_503(redis_url: str) -> None:
    store = Store(connect("redis://127.0.0.1:1/0", 0.5))
    async with signed_in(mounted(store, secret=SECRET)) as client:
        down = await client.get("/ops/api/rooms")
        assert down.status_code == 503
        assert "Redis unavailable" in down.json()["error"]
        assert (await client.post("/ops/api/rooms/sale", json={"rate": 2})).status_code == 503
    await store.aclose()


async def test_rooms_come_with_their_title_and_their_controller_s_verdict(store: Store) -> None:
    """The title lives in code, not in Redis: given the rooms, the back
    office shows it; a template's room gets its own. Each room carries its
    controller's reason as a short verdict (`health_verdict`)."""
    tickets = Room(
        "ticket-{event}", paths=["/t/{event}"], rate=1, title=lambda values: f"Gig {values['event']}"
    )
    await store.enter(Room("ticket-42", paths=["/t/42"], rate=1), "v")
    office = mounted(
        store, secret=SECRET, rooms=[Room("sale", paths=["/sale"], rate=1, title="Spring sale"), tickets]
    )
    async with signed_in(office) as client:
        rooms = {room["room"]: room for room in (await client.get("/ops/api/rooms")).json()["rooms"]}
        assert (rooms["sale"]["title"], rooms["ticket-42"]["title"]) == ("Spring sale", "Gig 42")
        assert rooms["sale"]["health_verdict"] == ""  # no controller, no reason
        detail = (await client.get("/ops/api/rooms/sale")).json()
        assert detail["stats"]["title"] == "Spring sale"
    async with signed_in(mounted(store, secret=SECRET)) as client:  # not given: none
        assert (await client.get("/ops/api/rooms/sale")).json()["stats"]["title"] == ""


async def test_a_room_gone_since_the_scan_is_left_out_of_the_rooms(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A room whose keys went between the scan and its read (its forget
    time, ``queuegate forget``) was a 404 for the whole list: the page said
    the back office was not answering. Its rooms are read together too."""
    await store.enter(Room("old", paths=["/old"], rate=1), "v")
    await _forget_after_the_scan(store, "old", monkeypatch)
    async with signed_in(mounted(store, secret=SECRET)) as client:
        response = await client.get("/ops/api/rooms")
    assert response.status_code == 200
    assert [room["room"] for room in response.json()["rooms"]] == ["sale"]


async def test_a_title_that_fails_in_code_is_logged_not_an_error_of_every_read(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A template's title function that raises failed every api/rooms call
    (a 500, and the page's banner for good)."""

    def broken(values: Mapping[str, str]) -> str:
        raise KeyError("event")

    await store.enter(Room("ticket-42", paths=["/t/42"], rate=1), "v")
    tickets = Room("ticket-{event}", paths=["/t/{event}"], rate=1, title=broken)
    async with signed_in(mounted(store, secret=SECRET, rooms=[tickets])) as client:
        response = await client.get("/ops/api/rooms")
        assert response.status_code == 200
        assert {room["room"]: room["title"] for room in response.json()["rooms"]}["ticket-42"] == ""
        assert (await client.get("/ops/api/rooms/ticket-42")).json()["stats"]["title"] == ""
    assert "the title of room 'ticket-42' could not be made" in caplog.text
