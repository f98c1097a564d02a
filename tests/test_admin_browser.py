"""The back office in a real browser (Playwright + Debian's Chromium): it
loads behind its sign-in, its charts draw points, a rate change applies and
shows in the activity list, and its strict CSP lets everything run.

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from queuegate import Health, Room, Store, admin
from queuegate.admin import activity
from queuegate.embedded import EmbeddedServer, free_port
from queuegate.health import BOUNDS_MS
from queuegate.store import connect

from .conftest import chromium_or_skip, served

chromium_or_skip()

from axe_playwright_python.sync_playwright import Axe  # noqa: E402

from .test_accessibility import WCAG_AA  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SECRET = "a-back-office-secret"
# A phone as the operator's trial held it: 390 px wide, touched, 3 pixels a px.
PHONE = {"is_mobile": True, "has_touch": True, "device_scale_factor": 3}
ROOM = Room("sale", paths=["/sale"], rate=2, per=30.0, abandon=3600.0)
ADAPTIVE = Room("adaptive", paths=["/a"], rate=20, per=1.0, target=Health(p95_ms=300))

# The pixels of a series line: the colour admin.js gives "waiting".
COUNT_BLUE = """(selector) => {
  const canvas = document.querySelector(selector + " canvas");
  if (!canvas) return -1;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (Math.abs(data[i] - 36) < 40 && Math.abs(data[i + 1] - 87) < 40 && Math.abs(data[i + 2] - 214) < 40
        && data[i + 3] > 128) n++;
  }
  return n;
}"""


def in_redis(redis_url: str, work: Any) -> Any:
    """Run ``work(store)`` on a store of its own, in a thread of its own (the
    served app and Playwright each have their own event loop)."""

    async def run() -> Any:
        store = Store(connect(redis_url, 5.0))
        try:
            return await work(store)
        finally:
            await store.aclose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


@contextmanager
def signed_in(
    browser: Any,
    store: Store,
    *,
    viewport: tuple[int, int] = (1280, 720),
    device: dict[str, Any] | None = None,
    problems: list[str] | None = None,
    **office: Any,
) -> Iterator[tuple[Any, str]]:
    """A back office on ``store`` (``office``: admin.app's options), served
    and signed in to from a page of a browser context of its own (``device``:
    more of its options, PHONE's), which asked for the office first and was
    sent to its sign-in. Yields the page and the server's address; the
    server stops, and ``store`` is closed, after. The page's errors go to
    ``problems`` from its first load."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await store.aclose()

    app = Starlette(routes=[Mount("/ops", admin.app(store, secret=SECRET, **office))], lifespan=lifespan)
    with served(app) as base:
        width, height = viewport
        page = browser.new_context(viewport={"width": width, "height": height}, **(device or {})).new_page()
        if problems is not None:
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{base}/ops/")
        assert page.url.endswith("/ops/login")
        page.fill("#secret", SECRET)
        page.click("button[type=submit]")
        yield page, base


def test_the_back_office_in_a_browser(redis_url: str, browser: Any) -> None:
    now = int(time.time() * 1000)

    async def an_event_so_far(store: Store) -> None:
        # Five minutes of a line, then now: closed one-minute points to chart.
        for minute in range(5, 0, -1):
            at = now - minute * 60_000
            for i in range(6):
                await store.enter(ROOM, f"m{minute}-{i}", now=at + i)
        await store.stats(ROOM)
        await store.enter(ADAPTIVE, "someone")

    in_redis(redis_url, an_event_so_far)
    ARTIFACTS.mkdir(exist_ok=True)
    problems: list[str] = []
    office_store = Store(connect(redis_url, 5.0))
    with signed_in(browser, office_store, viewport=(1280, 1400), problems=problems) as (page, base):
        page.wait_for_selector("tr[data-room=sale]")
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#detail-title:has-text('Room sale')")

        # The line grows while the page watches: the live chart draws it.
        for burst in range(3):

            async def more(store: Store, burst: int = burst) -> None:
                for i in range(5):
                    await store.enter(ROOM, f"live{burst}-{i}")

            in_redis(redis_url, more)
            page.wait_for_timeout(2200)
        page.wait_for_function(f"() => ({COUNT_BLUE})('#live-chart') > 50", timeout=10_000)
        # The rooms table follows too, while the room picked keeps the focus
        # (it froze until the operator clicked elsewhere).
        assert page.evaluate("() => document.activeElement.textContent") == "sale"
        waiting = in_redis(redis_url, lambda store: store.stats("sale"))["waiting"]
        page.wait_for_function(
            f"() => document.querySelector('tr[data-room=sale] td:nth-child(3)').textContent === '{waiting}'",
            timeout=5000,
        )
        assert page.evaluate("() => document.activeElement.textContent") == "sale"
        page.wait_for_function(f"() => ({COUNT_BLUE})('#minutes-chart') > 50", timeout=10_000)
        assert page.locator("#waits tbody tr").count() >= 13  # a row per bucket, and the percentiles
        # Newcomers the client limit turned away: none yet, and said so.
        assert page.locator("#limited").text_content() == (
            f"Nobody refused a place by the client limit ({ROOM.client_limit} a minute from one address)."
        )

        # A rate change from the rooms table applies, and shows in the log.
        row = page.locator("tr[data-room=sale]")
        # A value typed and not applied yet stays, focused or not, marked as
        # such, while the table's figures go on (it held the whole table
        # still, and Apply later sent it with an unrelated change).
        row.locator("input[name=capacity]").fill("5")
        row.locator("button", has_text="sale").focus()
        assert row.locator("button.revert").is_visible()
        in_redis(redis_url, lambda store: store.enter(ROOM, "while-typed"))
        waiting = in_redis(redis_url, lambda store: store.stats("sale"))["waiting"]
        page.wait_for_function(
            f"() => document.querySelector('tr[data-room=sale] td:nth-child(3)').textContent === '{waiting}'",
            timeout=5000,
        )
        assert row.locator("input[name=capacity]").input_value() == "5"
        assert row.locator("input.unapplied").count() == 1
        row.locator("button.revert").click()
        assert row.locator("input[name=capacity]").input_value() == str(ROOM.capacity)
        assert row.locator(".unapplied").count() == 0
        assert row.locator("button.revert").is_hidden()
        row.locator("input[name=capacity]").fill("5")
        page.wait_for_timeout(2500)
        assert row.locator("input[name=capacity]").input_value() == "5"
        row.locator("input[name=capacity]").fill("0")
        row.locator("input[name=rate]").fill("7")
        row.locator("button", has_text="Apply").click()
        page.wait_for_selector("#message:has-text('Done: changed rate = 7')")
        page.wait_for_selector("#activity li:has-text('settings')", timeout=5000)
        assert "rate 7" in (page.text_content("#activity") or "")
        assert "admin" in (page.text_content("#activity") or "")
        page.wait_for_timeout(2500)  # a refresh with the new rate
        page.evaluate(
            "() => { document.activeElement.blur();document.querySelector('.wide').scrollLeft = 0 }"
        )
        page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
        assert row.locator("input[name=rate]").input_value() == "7"
        assert page.locator("#health-figure").is_hidden()  # no target, no health chart

        # The room's settings form sends only what was changed: its client
        # limit is shown, not sent as 0 with another change (it was blank,
        # and every Apply turned the limit off).
        assert page.input_value("#set-client_limit") == str(ROOM.client_limit)
        page.fill("#set-session", "900")
        page.locator("#settings button[type=submit]").click()
        page.wait_for_selector("#settings-message:has-text('Done: changed session = 900')")
        assert page.text_content("#settings-message") == "Done: changed session = 900"
        assert in_redis(redis_url, lambda store: store.stats("sale"))["client_limit"] == ROOM.client_limit

        # Every run-time setting is in the form: sliding, max_step and forget
        # were only in the API. The form holds the API's bounds (max_step of
        # 1 or more), and a change sent once is not sent again with the next.
        assert not page.is_checked("#set-sliding")
        assert page.input_value("#set-max_step") == str(ROOM.max_step)
        assert page.input_value("#set-forget") == "0"
        page.fill("#set-max_step", "0")
        assert not page.evaluate("() => document.getElementById('set-max_step').checkValidity()")
        page.check("#set-sliding")
        page.fill("#set-max_step", "50")
        page.fill("#set-forget", "7200")
        page.locator("#settings button[type=submit]").click()
        changed = "Done: changed sliding = true, max_step = 50, forget = 7200"
        page.wait_for_selector(f"#settings-message:has-text('{changed}')")
        stats = in_redis(redis_url, lambda store: store.stats("sale"))
        assert (stats["sliding"], stats["max_step"], stats["forget"]) == (1, 50, 7_200_000)
        page.fill("#set-abandon", "1800")
        page.locator("#settings button[type=submit]").click()
        page.wait_for_selector("#settings-message:has-text('Done: changed abandon = 1800')")
        assert page.text_content("#settings-message") == "Done: changed abandon = 1800"
        # A change that may starve the room is made, and said so as to stand out.
        page.fill("#set-session", "5")
        page.locator("#settings button[type=submit]").click()
        page.wait_for_selector("#settings-message:has-text('Done: changed session = 5')")
        assert page.text_content("#settings-message") == (
            "Done: changed session = 5. Warning: session 5 s: each visitor admitted from now on must queue "
            "again 5 s after coming in, or after that long without a request (sliding)"
        )
        assert "error" in (page.get_attribute("#settings-message", "class") or "").split()
        page.fill("#set-session", "900")
        page.locator("#settings button[type=submit]").click()
        page.wait_for_selector("#settings-message:text-is('Done: changed session = 900')")
        # What is set at run time says so, with the code's value; one button
        # sets it all back (the console's `--reset`: not in the page before).
        page.wait_for_selector("#set-session-origin", timeout=5000)
        assert page.text_content("#set-session-origin") == f"set at run time; code: {ROOM.session:g} s"
        assert page.text_content("#set-rate-origin") == f"set at run time; code: {ROOM.rate}"
        assert page.get_attribute("#set-session", "aria-describedby") == "set-session-origin"
        assert page.locator("#set-status-origin").count() == 0  # the code's
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("#settings button", has_text="Reset to the code's").click()
        page.wait_for_selector("#settings-message:has-text('back to the code')")
        stats = in_redis(redis_url, lambda store: store.stats("sale"))
        assert (stats["run_time"], stats["session"]) == ([], ROOM.session * 1000)
        page.wait_for_selector("#set-session-origin", state="detached")

        # A reset to the code's value says so in the log (it said "null").
        in_redis(redis_url, lambda store: store.configure("sale", session=None, who="ada"))
        page.wait_for_selector("#activity li:has-text('session reset to the code')", timeout=5000)
        assert "null" not in (page.text_content("#activity") or "")

        # The seed is offered only where there is a draw: a lottery here.
        assert page.locator("#seed").is_hidden()
        in_redis(redis_url, lambda store: store.configure("sale", method="random"))
        page.wait_for_selector("#seed:visible:has-text('lottery')", timeout=10_000)
        in_redis(redis_url, lambda store: store.configure("sale", method="fifo"))
        page.wait_for_selector("#seed", state="hidden", timeout=10_000)

        # A lottery that drew, switched back: its seed is still to publish.
        async def draw(store: Store) -> dict[str, Any]:
            lotto = Room("lotto", paths=["/lotto"], rate=1, per=1.0, method="random")
            for i in range(3):
                await store.enter(lotto, f"drawn-{i}")
            await asyncio.sleep(1.2)  # a refill: the next drawn from the line
            await store.stats(lotto)
            await store.configure("lotto", method="fifo")
            return await store.stats("lotto")

        assert in_redis(redis_url, draw)["draws"] > 0
        page.locator("tr[data-room=lotto] button", has_text="lotto").click()
        page.wait_for_selector("#detail-title:has-text('lotto')")
        page.wait_for_selector("#seed:visible:has-text('lottery')", timeout=10_000)
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#seed", state="hidden", timeout=10_000)

        # A room with a health target: its p95, target and rate, charted live.
        page.locator("tr[data-room=adaptive] button", has_text="adaptive").click()
        page.wait_for_selector("#health-figure:not([hidden])")
        # Its target is tuned here (one without a target shows it disabled).
        page.wait_for_selector("#set-target_ms:not([disabled])")
        assert page.input_value("#set-target_ms") == "300"
        # Switched off at run time (0), it is still a room with a target in
        # code: shown off, not absent, and switched on again from the page.
        in_redis(redis_url, lambda store: store.configure("adaptive", target_ms=0))
        adaptive = page.locator("tr[data-room=adaptive]")
        adaptive.locator("td:has-text('fixed: target off (0)')").wait_for()
        adaptive.locator("input[name=target_ms]").fill("300")
        adaptive.locator("button", has_text="Apply").click()
        page.wait_for_function(
            "() => document.querySelector('tr[data-room=adaptive] td.health').textContent.includes('p95')"
        )
        assert in_redis(redis_url, lambda store: store.stats("adaptive"))["target_ms"] == 300
        page.wait_for_function(f"() => ({COUNT_BLUE})('#health-chart') > 50", timeout=10_000)
        # Its figures are its last look's: read 90 s ago, with no response
        # since, the row says so (it showed them as the app's now).

        async def read_long_ago(store: Store) -> None:
            seconds, micros = await store.client.time()
            slow = [0] * (len(BOUNDS_MS) + 1)
            slow[-2] = 20
            at = int(seconds) * 1000 + int(micros) // 1000 - 90_000
            await store.report("adaptive", 20, 0, slow, slow, now=at)

        in_redis(redis_url, read_long_ago)
        adaptive.locator("td.health:has-text('ago: no response since')").wait_for(timeout=10_000)
        assert problems == [], problems

        # WCAG 2.x A and AA (axe-core), in both colour schemes, login page too.
        failures = []
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_timeout(300)
            results = Axe().run(page, options={"runOnly": {"type": "tag", "values": WCAG_AA}})
            failures += [
                f"{scheme}: {v['id']}: {[n['target'] for n in v['nodes']]}"
                for v in results.response["violations"]
            ]
        login = browser.new_context().new_page()
        login.goto(f"{base}/ops/login")
        results = Axe().run(login, options={"runOnly": {"type": "tag", "values": WCAG_AA}})
        failures += [f"login: {v['id']}" for v in results.response["violations"]]
        assert not failures, "\n".join(failures)

    # Reset to the code's above, and not changed since.
    assert in_redis(redis_url, lambda store: store.stats("sale"))["rate"] == ROOM.rate


def signed_in_until(browser: Any, store: Store, selector: str) -> Any:
    """Signs in to a back office on ``store`` and waits for ``selector``;
    returns the page (its server stopped, what it shows kept)."""
    with signed_in(browser, store) as (page, _):
        page.wait_for_selector(selector)
        return page


def rooms_table_says(browser: Any, store: Store, text: str) -> Any:
    """Signs in to a back office on ``store`` and waits for the rooms table
    to say ``text``; returns the page."""
    return signed_in_until(browser, store, f"#rooms td:has-text('{text}')")


def test_a_room_named_dash_is_named_in_the_activity_list(redis_url: str, browser: Any) -> None:
    """The room name "-" is legal; the page took it for the mark of an entry of
    no one room and showed that room's changes without its name."""

    async def changes(store: Store) -> None:
        await store.enter(Room("-", paths=["/d"], rate=1), "v")
        await store.configure("-", rate=3, who="ada")
        # (Entries of one millisecond from two logs have no order between them.)
        await asyncio.sleep(0.005)
        await activity.record(store, "bob", "virtual visitors", {"visitors": 3})

    in_redis(redis_url, changes)
    page = signed_in_until(
        browser, Store(connect(redis_url, 5.0)), "#activity li:has-text('virtual visitors')"
    )
    entries = page.locator("#activity li").all_text_contents()
    assert [entry.split(" · ", 1)[1] for entry in entries] == [
        "bob · virtual visitors: visitors 3",
        "ada · - · settings: rate 3, per 60",
    ]


def test_the_back_office_of_no_room_says_so_once_it_knows(redis_url: str, browser: Any) -> None:
    """Before its first answer the table says it is loading, not that there
    are no rooms (a demo's back office said "no rooms yet" for its first
    moment, with eight visitors in the line); an answer without rooms says
    so, and where rooms come from."""
    store = Store(connect(redis_url, 5.0), prefix="qg-no-room-yet")
    page = rooms_table_says(browser, store, "no rooms yet under this prefix")
    assert page.locator("#rooms tr").count() == 1


def test_the_back_office_without_redis_says_so_in_its_table(browser: Any) -> None:
    """Redis not answering: the table says it could not load the rooms (it
    said "loading the rooms…" for good, the reason only in the clock's
    line)."""
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there: a Redis that is down
    rooms_table_says(browser, Store(connect(down, 0.5)), "could not load the rooms")
    # On a phone, across the card, and the reason once, in the banner (it
    # was squeezed into half the card, the banner's words again).
    with signed_in(browser, Store(connect(down, 0.5)), viewport=(390, 800), device=PHONE) as (page, _):
        cell = page.locator("#rooms td:has-text('could not load the rooms')")
        cell.wait_for()
        page.wait_for_selector("#outage:has-text('Error 111')")
        width = "(s) => document.querySelector(s).getBoundingClientRect().width"
        assert page.evaluate(width, "#rooms td") >= 0.9 * page.evaluate(width, "#rooms-table")
        assert "Error 111" not in (cell.text_content() or "")


# Where each of these is on the page: its box's top and bottom.
BOX = """(selector) => {
  const r = document.querySelector(selector).getBoundingClientRect();
  return [r.top, r.bottom];
}"""


def test_what_an_operator_reads_at_a_glance(redis_url: str, browser: Any) -> None:
    """The room's title beside its name (it showed the name only), "and N
    more" under a cut list of visitors (ten, with no sign of the rest), a
    `--reset all` that names what it reset (every setting, in one long
    paragraph), and four charts in two
    rows of two (three and one alone at 1280 px), and how many newcomers
    the client limit turned away (nowhere to be seen)."""
    titled = Room("sale", paths=["/sale"], rate=2, per=60.0, title="Spring sale", client_limit=15)

    async def a_line(store: Store) -> None:
        for i in range(17):  # from one address: the last two are refused
            await store.enter(titled, f"visitor-{i:02d}", client="192.0.2.7")
        await store.enter(ADAPTIVE, "someone")
        await store.configure("sale", status="paused", who="ada")
        await store.configure("sale", rate=3, per=60.0, abandon=120.0, who="ada")
        await store.configure("sale", reset_all=True, who="ada")

    in_redis(redis_url, a_line)
    office_store = Store(connect(redis_url, 5.0))
    with signed_in(browser, office_store, viewport=(1280, 800), rooms=[titled, ADAPTIVE]) as (page, _):
        page.wait_for_selector("tr[data-room=sale]")
        assert page.text_content("tr[data-room=sale] .title") == "Spring sale"
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#detail-title:has-text('Room sale · Spring sale')")
        # 2 let in, 13 waiting, of whom the list shows the first 10.
        page.wait_for_selector("#visitors li.more")
        assert page.locator("#visitors li.more").all_text_contents() == ["and 3 more"]
        # The reset of every setting names what it reset, on one line: the
        # settings set at run time before it (it listed all 19).
        reset = page.locator("#activity > li", has_text="reset to the code's values")
        said = (reset.text_content() or "").split("reset to the code's values: ", 1)[1]
        assert sorted(said.split(", ")) == ["abandon", "per", "rate", "status"], said
        assert page.text_content("#limited") == (
            "Refused a new place by the client limit (15 a minute from one address): 2 times since the room"
            " was made. Many at once: is a proxy in front that the gate does not trust (trusted_proxies)?"
        )
        # Four charts: two rows of two.
        page.locator("tr[data-room=adaptive] button", has_text="adaptive").click()
        page.wait_for_selector("#health-figure:not([hidden])")
        tops = [page.evaluate(BOX, f"#detail figure:nth-of-type({i})")[0] for i in range(1, 5)]
        assert tops[0] == tops[1] < tops[2] == tops[3], tops


def test_the_admissions_a_minute_read_as_the_rate_they_are(redis_url: str, browser: Any) -> None:
    """The table said "admitted, last 60 s" over "1200.0": a measured rate
    (the last minute's admissions, the minute before weighed in as it
    slides away) headed as a count, with a decimal and no grouping. Headed
    "admitted a minute" now, as the console's list, and said as it says
    it: whole and grouped from 10 on, a tenth below."""
    busy = Room("busy", paths=["/b"], rate=2000, per=60.0, client_limit=0)

    async def admitted(store: Store) -> float:
        for i in range(1200):
            await store.enter(busy, f"v{i}")
        return float((await store.stats("busy"))["per_minute"])

    assert in_redis(redis_url, admitted) == 1200
    office_store = Store(connect(redis_url, 5.0))
    with signed_in(browser, office_store, rooms=[busy]) as (page, _):
        page.wait_for_selector("tr[data-room=busy]")
        heads = page.locator("#rooms-table th").all_text_contents()
        assert heads[4] == "admitted a minute", heads
        cell = page.locator("tr[data-room=busy] td:nth-child(5)")
        assert (cell.text_content(), cell.get_attribute("data-label")) == ("1,200", "admitted a minute")


def test_a_redis_outage_is_unmistakable_and_the_page_recovers_by_itself(browser: Any) -> None:
    """Redis away: the page kept its last figures with every control looking
    usable, said so only in small grey text in the header, and the header
    wrapped "Sign out" to a second line. Now a banner (role=alert) says it,
    the figures say when they were read, the controls are off, and all of
    it goes when Redis answers again."""
    server = EmbeddedServer(args=["--appendonly", "yes", "--appendfsync", "always"]).start()
    titled = Room("sale", paths=["/sale"], rate=2, per=60.0, title="Spring sale")
    try:

        async def a_line(store: Store) -> None:
            for i in range(15):
                await store.enter(titled, f"visitor-{i:02d}")

        in_redis(server.url, a_line)
        office_store = Store(connect(server.url, 0.5))
        shop = [("Shop", "/")]
        with signed_in(browser, office_store, viewport=(1280, 800), links=shop, rooms=[titled]) as (page, _):
            page.wait_for_selector("tr[data-room=sale]")
            page.wait_for_selector("#detail:not([hidden])")

            def sign_out_beside_the_heading() -> None:
                heading, sign_out = page.evaluate(BOX, "header h1"), page.evaluate(BOX, "header form")
                assert sign_out[0] < heading[1], (heading, sign_out)

            sign_out_beside_the_heading()
            # The keyboard is on a room's rate when Redis goes: it is there
            # again when Redis answers (a disabled control drops its focus).
            focused = "tr[data-room=sale] input[name=rate]"
            page.focus(focused)

            server.stop()
            page.wait_for_selector("#outage strong:has-text('Redis is not answering')", timeout=10_000)
            assert page.get_attribute("#outage", "role") == "alert"
            assert "were read at" in (page.text_content("#outage") or "")
            assert (page.text_content("#rooms-title .as-of") or "").startswith("as of ")
            usable = page.evaluate(
                "() => [...document.querySelectorAll('main button, main input, main select')]"
                ".filter(c => !c.disabled && c.id !== 'activity-room').map(c => c.outerHTML)"
            )
            assert usable == []
            assert page.text_content("#clock") == "offline"
            sign_out_beside_the_heading()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "admin-redis-away.png"))
            results = Axe().run(page, options={"runOnly": {"type": "tag", "values": WCAG_AA}})
            found = [(v["id"], [n["target"] for n in v["nodes"]][:5]) for v in results.response["violations"]]
            assert found == []
            # Every part of the page in a landmark: the banner is in main.
            regions = Axe().run(page, options={"runOnly": {"type": "rule", "values": ["region"]}})
            assert regions.response["violations"] == []

            server.start()
            page.wait_for_selector("#message:has-text('Redis answers again')", timeout=10_000)
            assert page.text_content("#outage") == ""
            assert page.is_visible("#outage") is False
            assert page.text_content("#rooms-title .as-of") == ""
            assert page.is_enabled("tr[data-room=sale] input[name=rate]")
            assert page.is_enabled("#drain")
            assert (page.text_content("#clock") or "").startswith("live")
            assert page.evaluate(f"() => document.activeElement.matches({focused!r})")
    finally:
        server.close()


CLEARED = "() => document.getElementById('outage').textContent === ''"


def test_the_banner_says_who_answered(redis_url: str, browser: Any) -> None:
    """A proxy's page in place of the back office's JSON (its 502 when the
    back office is down, its 503 too) is the back office not answering, not
    the back office answering 502 (or Redis down); an answer of the back
    office's own is said with its status, said again when the status changes;
    and all of it goes when the rooms are read again."""
    titled = Room("sale", paths=["/sale"], rate=2, per=60.0)

    async def a_line(store: Store) -> None:
        await store.enter(titled, "ada")

    in_redis(redis_url, a_line)
    with signed_in(browser, Store(connect(redis_url, 5.0)), viewport=(1280, 800)) as (page, _):
        page.wait_for_selector("tr[data-room=sale]")
        rooms = "**/ops/api/rooms"

        def answer(status: int, body: str, kind: str) -> None:
            page.unroute(rooms)
            page.route(rooms, lambda route: route.fulfill(status=status, body=body, content_type=kind))

        for status in (502, 503):
            answer(status, "<html><body>Bad gateway</body></html>", "text/html")
            said = "#outage strong:has-text('The back office is not answering')"
            page.wait_for_selector(said, timeout=10_000)
            page.unroute(rooms)
            page.wait_for_function(CLEARED, timeout=10_000)
        answer(500, '{"error": "a bug"}', "application/json")
        page.wait_for_selector("#outage strong:has-text('The back office answered 500.')", timeout=10_000)
        answer(404, '{"error": "no such thing"}', "application/json")
        page.wait_for_selector("#outage strong:has-text('The back office answered 404.')", timeout=10_000)
        page.unroute(rooms)
        page.wait_for_function(CLEARED, timeout=10_000)
        assert "The back office answers again" in (page.text_content("#message") or "")


def test_a_room_that_lets_everyone_in_says_so(redis_url: str, browser: Any) -> None:
    """Rate and capacity both 0 (no limit), which a deploy can leave under a
    run-time value though configure refuses to make it: the room's page says
    so above its charts, and stops saying it once the room has a limit."""

    async def deployed(store: Store) -> None:
        await store.enter(Room("shop", paths=["/s"], rate=10, per=60.0), "a")
        await store.configure("shop", capacity=0)
        await store.enter(Room("shop", paths=["/s"], capacity=100), "b")  # the deploy

    in_redis(redis_url, deployed)
    office_store = Store(connect(redis_url, 5.0))
    with signed_in(browser, office_store) as (page, _):
        page.wait_for_selector("tr[data-room=shop]")
        page.locator("tr[data-room=shop] button", has_text="shop").click()
        page.wait_for_selector("#unlimited:not(:empty)")
        assert page.text_content("#unlimited") == (
            "This room lets everyone in: its rate and capacity are both 0 (no limit). Give one a value, or"
            " reset them to the code's."
        )
        assert page.locator("#unlimited").is_visible()
        in_redis(redis_url, lambda store: store.configure("shop", capacity=None))
        page.wait_for_selector("#unlimited:empty", state="attached", timeout=10_000)
        assert not page.locator("#unlimited").is_visible()


# Each y axis's labels, measured in the axis's font: each whole in the
# axis's own band (not under the axis's title, not past the canvas's edge),
# and a large figure compact (no more than 4 digits: "120K", not "120,000").
Y_LABELS = """() => {
  const out = [], ctx = document.createElement("canvas").getContext("2d");
  let top = 0;
  for (const node of document.querySelectorAll(".chart")) {
    const plot = node.uplot;
    if (!plot || node.closest("[hidden]")) continue;
    plot.axes.forEach((axis, i) => {
      if (i === 0) return;  // the times
      // uPlot keeps the font at the device's pixels: CSS pixels here.
      ctx.font = axis.font[0];
      const inset = (axis.ticks.show ? axis.ticks.size : 0) + axis.gap;
      // A left axis (side 3) ends at its _pos, its labels right-aligned
      // there less the inset; a right one starts there.
      const left = axis.side === 3;
      const [start, end] = left ? [axis._pos - axis._size, axis._pos] : [axis._pos, axis._pos + axis._size];
      axis._values.forEach((text, j) => {
        const w = ctx.measureText(String(text)).width / devicePixelRatio;
        const [from, to] = left ? [end - inset - w, end - inset] : [start + inset, start + inset + w];
        if (from < Math.max(0, start) - 0.5 || to > Math.min(plot.width, end) + 0.5)
          out.push(`${node.id} cuts ${text}: ${from.toFixed(1)} to ${to.toFixed(1)} in ${start} to ${end}`);
        if (String(text).replace(/\\D/g, "").length > 4) out.push(`${node.id} says ${text} in full`);
        top = Math.max(top, axis._splits[j]);
      });
    });
  }
  return { top, out };
}"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_charts_show_large_figures_whole(redis_url: str, browser: Any, width: int) -> None:
    """An operator's trial with 120,000 waiting: the y axes' labels ran into
    the axes' titles ("100,000" over "people") and off the canvas (a rate
    of "1,500,000"), uPlot's axes being 50 px whatever their labels. Each
    is as wide as its labels now, and a figure from 10,000 on is compact
    ("120K", "1.5M"); the legends say it exactly, its digits grouped."""
    crowded = Room("crowd", paths=["/c"], rate=1, per=60.0, target=Health(p95_ms=300))

    async def a_crowd(store: Store) -> int:
        await store.enter(crowded, "first")
        await store.stats(crowded)
        for start in range(0, 120_000, 2000):
            # Each from an address of its own: the client limit is not the subject.
            joins = [
                (f"v{i}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}") for i in range(start, start + 2000)
            ]
            assert await store.join_many(crowded, joins) is not None
        # Held in line, with a rate and a target of the same scale (the
        # health chart's two axes), and estimates of 7 million seconds.
        await store.configure("crowd", status="paused", rate=1_500_000, target_ms=120_000, ceiling=0)
        return int((await store.stats("crowd"))["waiting"])

    waiting = in_redis(redis_url, a_crowd)
    office_store = Store(connect(redis_url, 5.0))
    phone = PHONE if width == 390 else None
    with signed_in(browser, office_store, viewport=(width, 900), device=phone, rooms=[crowded]) as (page, _):
        page.wait_for_selector("#health-figure:not([hidden])")
        page.wait_for_function("() => document.querySelectorAll('.chart canvas').length === 4")
        page.wait_for_timeout(2500)  # a refresh: the minutes' chart with its points
        labels = page.evaluate(Y_LABELS)
        assert labels["top"] >= 1_000_000, labels
        assert labels["out"] == []
        legend = page.text_content("#live-chart .u-legend") or ""
        assert f"{waiting:,}" in legend, legend
        # Waits in the unit that reads best: estimates of 83 days read "7M" seconds.
        waits = page.evaluate("() => document.getElementById('waits-chart').uplot.axes[1].label")
        assert waits == "days"
        assert " d" in (page.text_content("#waits-chart .u-legend") or "")
        # The rooms table and the visitors' list group the digits too.
        assert page.text_content("tr[data-room=crowd] td:nth-child(3)") == f"{waiting:,}"
        assert page.text_content("#visitors li.more") == f"and {waiting - 10:,} more"
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator(".charts").screenshot(path=str(ARTIFACTS / f"admin-large-figures-{width}.png"))


# Every control a finger may press, as drawn: its box in CSS px, and
# whether it is one of the main actions.
TARGETS = """(main) => [...document.querySelectorAll(
    "a[href], button, input, select, textarea, summary, [tabindex], .u-legend .u-series")]
  .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden")
  .map(e => {
    const r = e.getBoundingClientRect();
    return { what: e.outerHTML.slice(0, 100), width: r.width, height: r.height, main: e.matches(main) };
  })"""
# What an operator does, as against picking a room or a visitor, or typing.
MAIN_ACTIONS = (
    "header button, main.login button, #rooms td.actions button, #settings button, #visitor-form button,"
    " #drain, #seed, #sim-form button"
)


def test_every_control_is_big_enough_for_a_finger_on_a_phone(redis_url: str, browser: Any) -> None:
    """WCAG 2.2's target size (2.5.8) on a 390 px phone: every button, link,
    field and checkbox at least 24 by 24 CSS px, the main actions (Apply,
    Revert, Release, Drain, Sign out...) 44 by 44. An operator's trial
    found the checkboxes 13 px, the selects 20 px and the header's links
    16 px high, and Apply 31."""
    lottery = Room("sale", paths=["/sale"], rate=1, per=60.0, method="random", title="Spring sale")

    async def a_line(store: Store) -> None:
        for i in range(4):
            await store.enter(lottery, f"visitor-{i}")
        await store.enter(ADAPTIVE, "someone")

    in_redis(redis_url, a_line)
    office_store = Store(connect(redis_url, 5.0))
    links = [("Shop", "/"), ("Docs", "/docs")]
    office: dict[str, Any] = {
        "links": links,
        "visitors_url": "http://127.0.0.1:9/",
        "rooms": [lottery, ADAPTIVE],
    }
    with signed_in(browser, office_store, viewport=(390, 900), device=PHONE, **office) as (page, base):
        page.wait_for_selector("tr[data-room=sale]")
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#detail-title:has-text('Room sale')")
        page.wait_for_selector("#visitors li button")
        page.wait_for_selector("#seed:visible")
        page.wait_for_selector("#simulate:not([hidden])")
        # A value typed and not applied yet: its row's Revert shows.
        page.locator("tr[data-room=sale] input[name=rate]").fill("5")
        page.wait_for_selector("tr[data-room=sale] button.revert:visible")
        targets = page.evaluate(TARGETS, MAIN_ACTIONS)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "admin-phone-targets.png"), full_page=True)
        login = browser.new_context(viewport={"width": 390, "height": 900}, **PHONE).new_page()
        login.goto(f"{base}/ops/login")
        targets += login.evaluate(TARGETS, MAIN_ACTIONS)
        login.context.close()
    # All kinds measured, every main action among them.
    kinds = {target["what"].split(" ")[0].split(">")[0] for target in targets}
    assert {"<a", "<button", "<input", "<select", "<tr"} <= kinds, kinds
    assert 'type="checkbox"' in " ".join(target["what"] for target in targets)
    # Sign out, Apply (two rooms), Revert, Apply changes, Release, Remove, Drain, the seed, Launch, Sign in.
    assert sum(target["main"] for target in targets) == 11, [target for target in targets if target["main"]]
    small = [target for target in targets if target["width"] < 24 or target["height"] < 24]
    assert small == []
    cramped = [
        target for target in targets if target["main"] and (target["width"] < 44 or target["height"] < 44)
    ]
    assert cramped == []


PRESSED_AT_THE_BOTTOM = """(selector) => {
  const button = document.querySelector(selector);
  button.scrollIntoView({ block: "end" });
  button.click();
}"""
# Its first line at least in the window.
IN_VIEW = """(id) => { const r = document.getElementById(id).getBoundingClientRect();
  return r.height > 0 && r.top >= 0 && r.top + 16 <= innerHeight; }"""


def test_each_change_is_said_beside_its_control(redis_url: str, browser: Any) -> None:
    """An operator's review: a change made in the settings was confirmed
    under the rooms table, a screen above; a release of a visitor who held
    nothing read 'Done:' and went into the activity log; a row's Apply with
    nothing typed said 'Done: ' and nothing else; Enter in a row's field did
    nothing; the table outgrew its box once a value was typed (its Revert)."""
    for visitor in ("someone", "another", "waiting"):  # two admitted (2 per 30 s), one in line
        in_redis(redis_url, lambda store, visitor=visitor: store.enter(ROOM, visitor))
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, _):
        row = page.locator("tr[data-room=sale]")
        row.wait_for()
        # The least width the table needs (its columns' unbreakable content).
        least = """() => { const t = document.querySelector('#rooms-table'); t.style.width = 'min-content';
          const w = t.offsetWidth; t.style.width = ''; return w; }"""
        before = page.evaluate(least)
        row.locator("input[name=rate]").fill("3")
        assert row.locator("button.revert").is_visible()
        assert page.evaluate(least) <= before + 12, (before, page.evaluate(least))  # beside Apply: +70 px
        row.locator("input[name=rate]").press("Enter")
        page.wait_for_selector("#message:text-is('Done: changed rate = 3')")
        page.wait_for_timeout(2500)  # a refresh with the new rate
        row.locator("button", has_text="Apply").click()
        page.wait_for_selector("#message:text-is('Nothing changed in sale.')")

        row.locator("button", has_text="sale").click()
        page.wait_for_selector("#set-abandon")
        page.fill("#set-abandon", "1200")
        # Pressed at the window's bottom edge (Playwright's click would
        # scroll it up first): the answer below it is brought into sight.
        page.evaluate(PRESSED_AT_THE_BOTTOM, "#settings button[type=submit]")
        page.wait_for_selector("#settings-message:text-is('Done: changed abandon = 1200')")
        assert page.evaluate(IN_VIEW, "settings-message")

        page.fill("#visitor-id", "waiting")
        page.locator("#visitor-form button", has_text="Release").click()
        page.wait_for_selector("#visitor-message:has-text('Nothing released: waiting holds no admission')")
        page.fill("#visitor-id", "nosuchvisitor")
        page.evaluate(PRESSED_AT_THE_BOTTOM, "#visitor-form button[value=release]")
        said = "Nothing released: nosuchvisitor holds no admission"
        page.wait_for_selector(f"#visitor-message:has-text('{said}')")
        assert "error" in (page.get_attribute("#visitor-message", "class") or "").split()
        assert page.evaluate(IN_VIEW, "visitor-message")
        page.fill("#visitor-id", "someone")
        page.locator("#visitor-form button", has_text="Remove").click()
        page.wait_for_selector("#visitor-message:text-is('Done: remove someone')")
        assert "error" not in (page.get_attribute("#visitor-message", "class") or "").split()
    log = in_redis(redis_url, lambda store: store.activity("sale"))
    # The release of one still in line changed nothing, and is not logged;
    # that of a visitor Redis does not know revoked any copy of an
    # admission, and is, as the remove is.
    logged = [(e["action"], e["details"]) for e in log if e["action"] in ("release", "remove")]
    assert sorted(logged, key=str) == [
        ("release", {"visitor": "nosuchvisitor", "held_a_place": False}),
        ("remove", {"visitor": "someone", "held_a_place": True}),
    ], log


def test_the_charts_axes_read_on_the_dark_scheme(redis_url: str, browser: Any) -> None:
    """The charts' axis figures and titles are drawn in the page's text
    colour: uPlot's default black was about 1.1:1 on the dark background."""
    in_redis(redis_url, lambda store: store.enter(ROOM, "someone"))
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, _):
        page.emulate_media(color_scheme="dark")
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#live-chart canvas")
        page.wait_for_timeout(2500)  # drawn again at a refresh
        light = """() => {
          const c = document.querySelector('#live-chart canvas');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0;
          for (let i = 0; i < d.length; i += 4) {
            if (d[i] > 180 && d[i + 1] > 180 && d[i + 2] > 180 && d[i + 3] > 128) n++;
          }
          return n;
        }"""
        assert page.evaluate(light) > 200  # the axes' figures, in light ink
