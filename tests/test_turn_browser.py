"""The turn that comes while the waiting page is in a background tab, in
Chromium: the tab's title says so, the visitor's opt-ins ring and notify,
and the page goes in when the visitor looks at it again.

Headless Chromium reports every page as visible, so an init script makes
``document.hidden`` follow a flag the test sets, and records notifications.
Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from queuegate import QueueGate, Room
from queuegate.embedded import EmbeddedServer
from queuegate.invalidations import DEAD_AFTER

from .conftest import PATIENT, SECRET, chromium_or_skip, lifespan_app, served
from .servers.proxies import SilencingProxy
from .test_deadlines import hang, resume

chromium_or_skip()

from playwright.sync_api import Browser, Page, Route  # noqa: E402
from playwright.sync_api import Error as PlaywrightError  # noqa: E402

HIDDEN_TAB = """
window.__hidden = false;
Object.defineProperty(document, "hidden", { get: function () { return window.__hidden; } });
window.__notified = [];
window.Notification = function (text) { window.__notified.push(text); };
window.Notification.permission = "default";
window.Notification.requestPermission = function () {
  window.Notification.permission = "granted";
  return Promise.resolve("granted");
};
"""


def until(page: Page, expression: str, seconds: float = 15.0) -> None:
    """Poll ``expression`` in the page (the page's CSP forbids the eval
    Playwright's wait_for_function would use)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if page.evaluate(expression):
                return
        except PlaywrightError as exc:  # the page navigated while asked: ask the next one
            if "context was destroyed" not in str(exc):
                raise
        assert time.monotonic() < deadline, f"never true: {expression}"
        time.sleep(0.1)


@pytest.fixture
def shop(redis_url: str) -> Iterator[str]:
    gate = QueueGate(
        lifespan_app,
        # A short abandon: the page polls every second, as near the front.
        rooms=[Room("sale", paths=["/checkout*"], capacity=1, client_limit=0, session=60, abandon=3)],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
        timeout=PATIENT,
    )
    with served(gate) as base:
        yield base


def test_a_turn_in_a_background_tab_rings_notifies_and_waits_for_the_visitor(
    shop: str, browser: Browser
) -> None:
    base = shop
    import httpx

    holder = httpx.Client()
    assert holder.get(base + "/checkout").status_code == 200  # the one slot
    context = browser.new_context(locale="de-DE")
    try:
        context.add_init_script(HIDDEN_TAB)
        page = context.new_page()
        page.goto(base + "/checkout")
        assert page.evaluate("document.documentElement.lang") == "de"
        page.click("#qg-notify")  # the visitor asks for a notification
        until(page, "window.Notification.permission === 'granted'")
        assert page.is_hidden("#qg-notify")
        page.check("#qg-sound")
        page.evaluate("window.__hidden = true")  # the visitor switches tabs
        holder.post(base + "/_queuegate/leave/sale")  # the slot frees up: it is this visitor's turn
        until(page, "document.title.indexOf('\\u25B6') === 0")
        assert "Sie sind an der Reihe" in page.title()
        assert page.evaluate("window.__notified") == ["Sie sind an der Reihe: Sie werden eingelassen."]
        time.sleep(0.5)
        assert "/checkout" in page.url
        assert page.query_selector("#qg-position") is not None  # still the waiting page: nobody looked
        page.evaluate("window.__hidden = false; document.dispatchEvent(new Event('visibilitychange'))")
        page.wait_for_selector("h1:text('Checkout')", timeout=10_000)  # in, once the visitor looked
    finally:
        context.close()
        holder.close()


def test_the_page_goes_in_when_the_turn_is_pushed(redis_url: str, browser: Browser) -> None:
    """A visible page whose poll interval is 20 s (a capacity room whose
    wait is unknown) goes in within seconds: the stream told it."""
    import httpx

    from .test_streams import gate_for

    gate = gate_for(redis_url)
    with served(gate) as base, httpx.Client() as holder:
        assert holder.get(base + "/checkout").status_code == 200
        page = browser.new_page()
        try:
            page.goto(base + "/checkout")
            assert page.get_attribute("#qg", "data-poll") == "20"
            time.sleep(1.0)  # the page has opened its stream
            holder.post(base + "/_queuegate/leave/sale")
            freed = time.monotonic()
            page.wait_for_selector("h1:text('Checkout')", timeout=5_000)
            print(f"\nthe page went in {time.monotonic() - freed:.2f} s after the turn came")
        finally:
            page.close()


def test_a_turn_the_stream_never_brought_is_found_by_the_pages_own_check(
    redis_url: str, browser: Browser
) -> None:
    """A stream that goes quiet while its connection stays open (a proxy
    that stops relaying, a push lost) left the page waiting for a turn
    that had come. A page whose stream brings no news for twice its poll
    interval (30 s at least, up to half as long again) asks once: it goes
    in then."""
    import httpx

    gate = QueueGate(
        lifespan_app,
        # 1 admitted every 10 s: the page's turn comes by itself, at the
        # next interval, a few seconds after it opened.
        rooms=[Room("sale", paths=["/checkout*"], rate=1, per=10, client_limit=0)],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
        timeout=PATIENT,
    )
    with served(gate) as base, httpx.Client() as holder:
        proxy = SilencingProxy(base, after=1.0)
        page = browser.new_page()
        try:
            assert holder.get(proxy.url + "/checkout").status_code == 200  # this interval's one
            opened = time.monotonic()
            page.goto(proxy.url + "/checkout")
            assert page.locator("#qg-position").is_visible()
            page.wait_for_selector("h1:text('Checkout')", timeout=70_000)
            took = time.monotonic() - opened
        finally:
            page.close()
            proxy.close()
    assert b"event: state" in proxy.silenced  # the turn was sent, and never reached the page
    assert 29.0 < took < 60.0, took  # found by the page's check after 30-45 s without news


@contextmanager
def waiting_in_a_background_tab(shop: str, browser: Browser) -> Iterator[Page]:
    """A visitor's waiting page (the one slot held by another), polling
    every second with no stream, notifications allowed, in a tab the
    visitor has left."""
    import httpx

    holder = httpx.Client()
    assert holder.get(shop + "/checkout").status_code == 200  # the one slot
    context = browser.new_context()
    try:
        # (Notifications also kept in the tab's session, which outlives a reload.)
        context.add_init_script(
            HIDDEN_TAB
            + "window.EventSource = undefined;"
            + "var __record = window.Notification; window.Notification = function (text) {"
            + " sessionStorage.setItem('notified', text); __record(text); };"
            + "window.Notification.permission = __record.permission;"
            + "window.Notification.requestPermission = __record.requestPermission;"
        )
        page = context.new_page()
        page.goto(shop + "/checkout")
        assert page.query_selector("#qg-position") is not None
        page.click("#qg-notify")
        until(page, "window.Notification.permission === 'granted'")
        page.evaluate("window.__hidden = true")
        yield page
    finally:
        context.close()
        holder.close()


def test_a_page_the_line_forgot_goes_back_without_ringing_a_turn(
    shop: str, redis_url: str, browser: Browser
) -> None:
    """Redis's data lost while the page waits in a background tab: its poll
    answers "none", which the page took for its turn (the tab's title, the
    tone, a notification, then a wait for the visitor to look). Only an
    admission is a turn: the page goes back to the gated page at once,
    which places the visitor again, and says nothing of a turn."""
    import redis as sync_redis

    with waiting_in_a_background_tab(shop, browser) as page:
        client = sync_redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match="*{sale}*"):
            client.delete(key)  # the room's data, lost
        client.close()
        until(page, "document.readyState === 'complete' && !document.getElementById('qg-notify')")
        assert page.evaluate("sessionStorage.getItem('notified')") is None  # no turn rung before it went


def test_a_room_let_through_rings_the_turn_of_a_page_in_a_background_tab(
    shop: str, redis_url: str, browser: Browser
) -> None:
    """The operator lets everyone through (passthrough): for a page waiting
    in a background tab that is its turn, rung as an admission is."""
    from .test_cli import cli

    with waiting_in_a_background_tab(shop, browser) as page:
        assert cli("set", "sale", "--status", "passthrough", url=redis_url).returncode == 0
        until(page, "document.title.indexOf('\\u25B6') === 0")
        assert page.evaluate("sessionStorage.getItem('notified')")


def _one_admission_an_hour(own_server: EmbeddedServer) -> QueueGate:
    """A gate whose one admission of the hour goes to the first client: the
    next waits at the front, its page polling every second (abandon 3 s)."""
    return QueueGate(
        lifespan_app,
        rooms=[Room("sale", paths=["/checkout*"], rate=1, per=3600.0, client_limit=0, abandon=3)],
        secret_key=SECRET,
        redis=own_server.url,
        cookie_secure=False,
        environ={},
    )


@pytest.mark.parametrize("pushed", [True, False], ids=["stream", "polls"])
def test_the_page_says_when_the_line_cannot_be_checked_and_keeps_the_place(
    own_server: EmbeddedServer, browser: Browser, pushed: bool
) -> None:
    """Redis hangs (SIGSTOP) under a waiting page: the page says the line
    cannot be checked (a notice and, once, the screen reader's status),
    keeps showing its place, and takes the notice down once it hears from
    the line again; over its stream (`event: unavailable`) or, without
    one, its polls (503 `unavailable`). Before, the bundled page ignored
    both and only its 'last updated' time grew old."""
    import httpx

    with served(_one_admission_an_hour(own_server)) as base, httpx.Client() as holder:
        assert holder.get(base + "/checkout").status_code == 200
        context = browser.new_context()
        try:
            if not pushed:
                context.add_init_script("delete window.EventSource;")
            page = context.new_page()
            page.goto(base + "/checkout")
            assert page.text_content("#qg-position") == "1"
            assert page.is_hidden("#qg-trouble")
            time.sleep(1.5)  # the stream is open, or a poll or two went well
            said = "We cannot check the line right now"
            hang(own_server)
            try:
                # The stream hears it once the subscription is given up
                # (DEAD_AFTER without an answer to its pings) and the
                # room's resync fails; a poll at its first failure.
                until(page, "!document.getElementById('qg-trouble').hidden", DEAD_AFTER + 10)
                assert said in (page.text_content("#qg-say") or "")
                assert page.text_content("#qg-position") == "1"
                still = "document.querySelector('#qg-trouble + .dots span').getAnimations().length === 0"
                assert page.evaluate(still)  # the dots stand still
            finally:
                resume(own_server)
            # Polls back off to 2 s, 4 s ... after failures; the stream hears
            # the place again once Redis answers.
            until(page, "document.getElementById('qg-trouble').hidden", 40)
            assert page.text_content("#qg-position") == "1"
            # Screen readers hear the place again: the outage is over.
            said_now = page.text_content("#qg-say") or ""
            assert said_now.startswith("Your place in line: 1."), said_now
            assert "/checkout" in page.url
        finally:
            context.close()


def test_a_quiet_streams_failed_check_is_asked_again_a_poll_interval_later(
    own_server: EmbeddedServer, browser: Browser
) -> None:
    """A stream with no news is checked by one poll after 30-45 s; a check
    that fails says the line cannot be checked and asks again a poll
    interval later (1 s here), not after another silence: before, the
    notice stayed up to 45 s after the line answered again. The page's
    clock is Playwright's, so the silence takes no time; the failed check
    is a 503 `unavailable` put in the check's way."""
    import httpx

    with served(_one_admission_an_hour(own_server)) as base, httpx.Client() as holder:
        assert holder.get(base + "/checkout").status_code == 200
        context = browser.new_context()
        try:
            context.clock.install()
            page = context.new_page()
            page.goto(base + "/checkout")
            assert page.text_content("#qg-position") == "1"
            time.sleep(1.5)  # the stream is open (on the real clock)
            checks: list[str] = []

            def unavailable(route: Route) -> None:
                checks.append(route.request.url)
                route.fulfill(status=503, content_type="application/json", body='{"state":"unavailable"}')

            page.route("**/_queuegate/status/sale", unavailable)
            # The stream's silence, a second at a time (one jump would also
            # pass the check's own 10 s time limit before its answer): its
            # check comes by 45 s, and fails.
            for _ in range(46):
                page.clock.run_for(1000)
                page.evaluate("0")  # the route's handler runs here
                if checks:
                    break
            assert checks, "the quiet stream was never checked"
            until(page, "!document.getElementById('qg-trouble').hidden", 10)
            assert page.text_content("#qg-position") == "1"
            page.unroute("**/_queuegate/status/sale")
            page.clock.run_for(2_500)  # a poll interval and more: asked again, and answered
            until(page, "document.getElementById('qg-trouble').hidden", 10)
            assert page.text_content("#qg-position") == "1"
        finally:
            context.close()


def test_the_pre_queue_says_when_the_line_cannot_be_checked(
    own_server: EmbeddedServer, browser: Browser
) -> None:
    """The pre-queue's page, counting down to a scheduled opening, says so
    too when Redis hangs (its polls fail), in a status, and takes it down
    once a poll answers; the countdown goes on."""
    gate = QueueGate(
        lifespan_app,
        # abandon 3 s: the page polls every second.
        rooms=[
            Room(
                "drop",
                paths=["/checkout*"],
                rate=1,
                per=3600,
                client_limit=0,
                abandon=3,
                opens_at=time.time() + 3600,
            )
        ],
        secret_key=SECRET,
        redis=own_server.url,
        cookie_secure=False,
        environ={},
    )
    with served(gate) as base:
        page = browser.new_page()
        try:
            page.goto(base + "/checkout")
            assert page.is_hidden("#qg-trouble")
            assert page.get_attribute("#qg-trouble", "role") == "status"
            countdown = page.text_content("#qg-countdown")
            hang(own_server)
            try:
                until(page, "!document.getElementById('qg-trouble').hidden", 30)
                assert "We cannot check the line right now" in (page.text_content("#qg-trouble") or "")
                assert page.text_content("#qg-countdown") != countdown
            finally:
                resume(own_server)
            until(page, "document.getElementById('qg-trouble').hidden", 70)
            assert page.text_content("#qg-trouble") == ""
        finally:
            page.close()
