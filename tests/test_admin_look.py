"""The back office reads as finished as the visitors' waiting page: its
sign-in a card with fields a finger can press, its durations said as the
console says them (Playwright + Debian's Chromium).

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import queuegate
from queuegate import Room, Store
from queuegate.analytics import WAIT_BOUNDS_MS
from queuegate.console import milliseconds
from queuegate.store import connect

from .conftest import chromium_or_skip

chromium_or_skip()

from .test_admin_browser import in_redis, signed_in  # noqa: E402

DASH = "\u2013"  # between a bucket's bounds
ROOM = Room("sale", paths=["/sale"], rate=1, per=3600.0)
# A duration as queuegate.console.duration writes it: "250 ms", "2.5 s",
# "42 s", "2 min 22 s", "1 h 5 min" (the page said "2.2 min").
DURATION = r"\d+ ms|\d\.\d s|\d+ (s|min|h|d)( \d+ (s|min|h))?"

STYLE = """(selector) => {
  const e = document.querySelector(selector), s = getComputedStyle(e), r = e.getBoundingClientRect();
  return { radius: s.borderTopLeftRadius, border: s.borderTopWidth, outline: s.outlineStyle,
           outlineWidth: s.outlineWidth, width: r.width, height: r.height, align: s.textAlign,
           listStyle: s.listStyleType };
}"""


def test_the_sign_in_is_a_card_as_the_waiting_page_is(redis_url: str, browser: Any) -> None:
    """The sign-in was a bare form: 26 px fields in the browser's default
    look, a heading and nothing else, beside a waiting page drawn as a
    card. Now a card, its fields 44 px high and as wide as its button, a
    wrong secret said in a box, and the focus ringed."""
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, base):
        login = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        login.goto(f"{base}/ops/login")
        card = login.evaluate(STYLE, "main.login")
        assert (card["radius"], card["border"]) == ("16px", "1px"), card
        assert card["width"] <= 26 * 16 + 1, card
        assert "Watch and run the waiting rooms" in (login.text_content("main.login .hint") or "")
        fields = [login.evaluate(STYLE, which) for which in ("#secret", "#name", "main.login button")]
        assert all(field["height"] >= 44 for field in fields), fields
        assert len({round(field["width"]) for field in fields}) == 1, fields
        login.fill("#secret", "not-the-secret")
        login.click("button[type=submit]")
        error = login.locator("main.login p.error[role=alert]")
        assert error.text_content() == "That is not the back office's secret."
        assert login.evaluate(STYLE, "main.login p.error")["radius"] != "0px"
        login.focus("#secret")
        login.keyboard.press("Tab")  # to the name, by the keyboard: its ring shows
        ring = login.evaluate(STYLE, "#name")
        assert (ring["outline"], ring["outlineWidth"]) == ("solid", "3px"), ring
        login.context.close()
        page.wait_for_selector("#rooms-table")  # (the signed-in page, for the office's server)


def test_durations_read_as_the_console_says_them(redis_url: str, browser: Any) -> None:
    """The page said "2.2 min" where `queuegate list` said "2 min 12 s" for
    the same wait, headed "wait at back" where the console says "wait at
    the back", its histogram "1.0 min - 2.0 min" and "0 s - 5 s" (en
    dashes), and a histogram with nobody in it three dashes."""

    async def a_line(store: Store) -> None:
        for i in range(3):
            await store.enter(ROOM, f"visitor-{i}")

    in_redis(redis_url, a_line)
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, _):
        page.wait_for_selector("tr[data-room=sale]")
        heads = [" ".join(h.split()) for h in page.locator("#rooms-table thead th").all_text_contents()]
        assert heads[5] == "wait at the back", heads
        back = page.locator("tr[data-room=sale] td:nth-child(6)")
        assert back.get_attribute("data-label") == "wait at the back"
        assert re.fullmatch(DURATION, back.text_content() or ""), back.text_content()
        # The first went straight in: a median wait of none, "0 s", not "0 ms".
        assert page.text_content("tr[data-room=sale] td:nth-child(7)") == "0 s"

        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("#waits tbody tr")
        rows = [text.replace("\xa0", " ") for text in page.locator("#waits tbody th").all_text_contents()]
        bounds = [milliseconds(ms) for ms in WAIT_BOUNDS_MS]
        expected = [f"up to {bounds[0]}"]
        expected += [f"{low} {DASH} {high}" for low, high in itertools.pairwise(bounds)]
        expected += [f"over {bounds[-1]}", "median · p90 · p99"]
        assert rows == expected, rows
        assert not any(".0 " in row for row in rows), rows
        # Nobody gave up: none yet, not three dashes.
        foot = page.locator("#waits tbody tr").last.locator("td").all_text_contents()
        assert foot[1] == "none yet", foot


def test_an_empty_log_is_a_sentence_and_each_heading_sits_over_its_figures(
    redis_url: str, browser: Any
) -> None:
    """An empty activity log read "1. no changes yet", numbered as an
    entry (then an unnumbered item of the list: a sentence now); the
    status column's heading sat at the right over a select at the left,
    "target p95 (ms)" broke into three lines and "wait at the back" into
    four."""

    async def a_room(store: Store) -> None:
        await store.enter(ROOM, "visitor")

    in_redis(redis_url, a_room)
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, _):
        page.wait_for_selector("tr[data-room=sale]")
        page.wait_for_selector("#activity-empty:visible")
        assert page.text_content("#activity-empty") == "No changes yet."
        # A sentence, not an item of the list (a screen reader said "list, 1 item").
        assert page.locator("#activity").is_hidden()
        assert page.locator("#activity li").count() == 0
        for column in (2, 12):  # the status (a select) and the health (words): from the left
            assert page.evaluate(STYLE, f"#rooms-table thead th:nth-child({column})")["align"] == "left"
        lines = page.evaluate(
            "() => [...document.querySelectorAll('#rooms-table thead th')].map(e => {"
            " const s = getComputedStyle(e);"
            " const pad = parseFloat(s.paddingTop) + parseFloat(s.paddingBottom);"
            " return Math.round((e.clientHeight - pad) / parseFloat(s.lineHeight)); })"
        )
        assert max(lines) <= 2, lines
        # The table still fits a 1280 px screen, its Apply in sight.
        assert page.evaluate(
            "document.querySelector('.wide').scrollWidth <= document.querySelector('.wide').clientWidth"
        )


def test_the_settings_are_labelled_in_the_consoles_words(redis_url: str, browser: Any) -> None:
    """The form said "most active at once (0 = none)", which reads as
    nobody where 0 is no limit, and "silent this long: skipped (s)",
    "unused this long: forgotten": `queuegate set --help`'s words now."""

    async def a_room(store: Store) -> None:
        await store.enter(ROOM, "visitor")

    in_redis(redis_url, a_room)
    with signed_in(browser, Store(connect(redis_url, 5.0))) as (page, _):
        page.locator("tr[data-room=sale] button", has_text="sale").click()
        page.wait_for_selector("label[for=set-capacity]")
        label = {
            name: page.text_content(f"label[for=set-{name}]") or ""
            for name in ("capacity", "abandon", "forget")
        }
        assert label["capacity"] == "most active sessions (0 = no limit)", label
        assert label["abandon"] == "skip waiting visitors silent for (s)", label
        assert label["forget"] == "expire the room unused for (s, 0 = never)", label
        texts = " ".join(page.locator("#settings label").all_text_contents())
        assert ": skipped" not in texts
        assert ": forgotten" not in texts


def test_the_page_says_a_duration_as_the_console_does(browser: Any) -> None:
    """The rule is written twice, in Python for the console and in the
    page's script: the page's ``seconds`` (its own text, run in Chromium)
    says what ``queuegate.console.milliseconds`` says for every reading,
    halves and the edges of each unit included. (Python's round() took
    halves to even: 142.5 s was "2 min 22 s" in the console and "2 min
    23 s" on the page; 999.6 ms was "1000 ms" in both.)"""
    script = (Path(queuegate.__file__).parent / "admin" / "static" / "admin.js").read_text()
    rule = script[script.index("  var UNKNOWN") : script.index('  // "1 min 30 s" on one line')]
    readings = [0, 0.4, 0.5, 1, 249.5, 999.4, 999.5, 999.6, 1000, 1049, 1050, 1949, 1950, 9949, 9950, 9999,
                10_000, 30_500, 59_499, 59_500, 142_500, 3_599_500, 3_600_000, 3_659_000, 86_399_500,
                90_061_000, 1e15, -1, None]  # fmt: skip
    page = browser.new_page()
    try:
        said = page.evaluate("(readings) => {" + rule + "; return readings.map(seconds); }", readings)
    finally:
        page.close()
    assert said == [milliseconds(ms) for ms in readings], list(zip(readings, said, strict=True))
