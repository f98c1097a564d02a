"""The back office at a phone's width and a laptop's, in Chromium, on the
served demo: nothing runs off the page or out of its card, the charts'
time labels do not collide, and virtual visitors' errors come with their
reasons and their give-ups show as drop-off at once.

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from queuegate.embedded import free_port

from .conftest import CHROMIUM_ARGS, chromium_or_skip, wait_for_http

chromium_or_skip()

TOKEN = "layout-test-token"

# Every element of each card ends inside it; no box scrolls sideways.
OVERFLOWS = """() => {
  const out = [];
  const page = document.documentElement.scrollWidth;
  if (page > innerWidth) out.push("page " + page);
  for (const section of document.querySelectorAll("main > section:not([hidden])")) {
    const edge = section.getBoundingClientRect().right + 0.5;
    for (const e of section.querySelectorAll("*")) {
      const r = e.getBoundingClientRect();
      if (r.width && r.right > edge) out.push(`${section.id} > ${e.tagName}.${e.className} ${r.right}`);
    }
    for (const e of section.querySelectorAll(".wide, .chart")) {
      if (e.scrollWidth > e.clientWidth + 1) out.push(e.className + " scrolls " + e.scrollWidth);
    }
  }
  return out.slice(0, 10);
}"""

# The x axis's labels of each chart, measured in the axis's font: the
# space between two neighbours' centres holds half of each, and a gap.
COLLISIONS = """() => {
  const out = [], ctx = document.createElement("canvas").getContext("2d");
  for (const node of document.querySelectorAll(".chart")) {
    const plot = node.uplot;
    if (!plot || node.closest("[hidden]")) continue;
    const axis = plot.axes[0];
    ctx.font = axis.font ? axis.font[0] : "12px system-ui";
    // uPlot keeps the font at the device's pixels: CSS pixels here.
    const labels = (axis._values || []).map((text, i) => ({ text, x: plot.valToPos(axis._splits[i], "x"),
      w: ctx.measureText(String(text)).width / devicePixelRatio }))
      .filter(l => l.text !== null && l.x >= 0 && l.x <= plot.bbox.width / devicePixelRatio);
    if (!labels.length) out.push(node.id + " has no time labels");
    for (let i = 1; i < labels.length; i++) {
      const a = labels[i - 1], b = labels[i];
      if (b.x - a.x < (a.w + b.w) / 2 + 4) out.push(node.id + ": " + a.text + " | " + b.text);
    }
    if (plot.root.getBoundingClientRect().right > node.closest("figure").getBoundingClientRect().right + 0.5)
      out.push(node.id + " wider than its figure");
    // Each label whole on its canvas ("04:38:00 A" was cut at the right edge).
    const left = plot.bbox.left / devicePixelRatio;
    for (const l of labels) {
      const [from, to] = [left + l.x - l.w / 2, left + l.x + l.w / 2];
      if (from < 0 || to > plot.width) out.push(node.id + " cuts " + l.text);
    }
  }
  return out;
}"""

# The live chart's x axis as the clock puts a label at its right edge (the
# newest point just before a round 10 s), and COLLISIONS of that drawing:
# in one evaluation, so that the page's own refresh cannot redraw the
# axis between them; a try a refresh did redraw is made again, and the
# answer says whether the edge was checked at all.
LABEL_AT_THE_EDGE = (
    """() => new Promise(done => {
  const collisions = """
    + COLLISIONS
    + """;
  const attempt = tries => {
    const plot = document.getElementById("live-chart").uplot, t = plot.data[0];
    const edge = Math.ceil(t[t.length - 1] / 10) * 10;
    plot.setScale("x", { min: edge - 20, max: edge + 0.01 });
    requestAnimationFrame(() => {
      if (plot.scales.x.min === edge - 20) done({ checked: true, collisions: collisions() });
      else if (tries > 1) attempt(tries - 1);
      else done({ checked: false, collisions: [] });
    });
  };
  attempt(10);
})"""
)


@pytest.fixture
def demo(redis_url: str) -> Iterator[str]:
    """The demo as its README runs it: its own process, on a port of its own,
    with a line of one a minute so that its visitors wait."""
    port = free_port()
    env = {**os.environ, "QUEUEGATE_REDIS_URL": redis_url, "QUEUEGATE_DEMO_ADMIN_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "demo_app", "--port", str(port), "--rate", "1", "--per", "60"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(base + "/")
        for event in ("jazz-night", "rock-arena"):
            httpx.get(f"{base}/tickets/{event}/buy")
        for _ in range(6):
            httpx.get(f"{base}/checkout")
        yield base
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(10)


@pytest.fixture(scope="module")
def window(browser: Any) -> Iterator[Any]:
    """Chromium as a desktop window draws it, its scrollbars taking room
    (Playwright's headless one hides them, which hid a sideways scroll at
    390 px)."""
    launched = browser.browser_type.launch(
        executable_path=chromium_or_skip(), args=CHROMIUM_ARGS, ignore_default_args=["--hide-scrollbars"]
    )
    yield launched
    launched.close()


def signed_in(browser: Any, base: str, width: int, **context: Any) -> Any:
    page = browser.new_context(viewport={"width": width, "height": 900}, **context).new_page()
    page.goto(f"{base}/admin-login?token={TOKEN}")
    page.wait_for_selector("#detail-title:has-text('Room')")
    page.wait_for_function("() => document.querySelectorAll('.chart canvas').length >= 3")
    return page


PHONE = {"is_mobile": True, "has_touch": True, "device_scale_factor": 3}


@pytest.mark.parametrize(
    ("width", "how"),
    [(390, "phone"), (390, "window"), (1280, "window")],
    ids=["390-phone", "390-window", "1280"],
)
def test_nothing_runs_off_the_page_or_its_card(
    demo: str, browser: Any, window: Any, width: int, how: str
) -> None:
    page = signed_in(window, demo, width) if how == "window" else signed_in(browser, demo, width, **PHONE)
    page.wait_for_timeout(2500)  # a refresh, and the minutes' chart with its points
    assert page.evaluate(OVERFLOWS) == []
    assert page.evaluate(COLLISIONS) == []
    assert page.evaluate(LABEL_AT_THE_EDGE) == {"checked": True, "collisions": []}
    # Every control of the rooms' table is on the screen, Apply included.
    apply = page.locator("tr[data-room=checkout] button", has_text="Apply").bounding_box()
    assert apply is not None
    assert apply["x"] + apply["width"] <= width
    page.screenshot(path=f"/tmp/queuegate-back-office-{width}-{how}.png", full_page=True)


def test_the_page_says_what_it_shows_and_nothing_twice(demo: str, browser: Any) -> None:
    """What a newcomer found unfinished: an empty band under the rooms, the
    charts' legends saying "--", numbers without units, the activity log
    twice, and a health target offered for a room that cannot have one."""
    page = signed_in(browser, demo, 1280)
    page.wait_for_timeout(2500)
    rooms = page.locator("section:has(#rooms-table)").bounding_box()
    table = page.locator("#rooms-table").bounding_box()
    assert rooms is not None
    assert table is not None
    assert rooms["y"] + rooms["height"] - (table["y"] + table["height"]) < 25  # the card's padding
    legends = page.evaluate(
        "() => [...document.querySelectorAll('.chart .u-legend tr')].map(tr => tr.textContent.trim())"
    )
    assert legends, "no legends"
    assert not [text for text in legends if "--" in text or text.startswith("Time")], legends
    for name in ("per", "session", "abandon", "settle"):
        assert "(s)" in (page.text_content(f"label[for=set-{name}]") or ""), name
    assert page.locator("ol.activity").count() == 1
    assert page.locator("h2, h3", has_text="ctivity").count() == 1
    # The demo's checkout has no health target in code: nothing to tune,
    # said before anything is typed.
    assert page.locator("#set-target_ms").is_disabled()
    assert "in code" in (page.text_content("#settings") or "")
    assert page.locator("tr[data-room=checkout] input[name=target_ms]").is_disabled()


def test_virtual_visitors_errors_have_reasons_and_give_ups_show_at_once(demo: str, browser: Any) -> None:
    page = signed_in(browser, demo, 1280)
    # A path nothing gates: each visitor gets a page, not the gate's answer.
    page.fill("#sim-visitors", "3")
    page.fill("#sim-path", "/no-such-page")
    page.click("#sim-form button[type=submit]")
    page.wait_for_selector("#sim-errors li", timeout=20_000)
    reasons = page.text_content("#sim-errors") or ""
    assert "3 \u00d7 the URL answered 404 Not Found: is it a page of the site, behind a room?" in reasons
    page.wait_for_selector("#sim-status:has-text('Last run, of 3')")

    # All give up, and press Leave the line: the room counts them at once.
    page.fill("#sim-visitors", "20")
    page.fill("#sim-path", "/checkout")
    page.fill("#sim-give-up", "1")
    page.click("#sim-form button[type=submit]")
    page.wait_for_selector("#sim-status:has-text('Running, of 20')")
    status = page.text_content("#sim-status") or ""
    assert "not started yet" in status
    page.locator("tr[data-room=checkout] button", has_text="checkout").click()
    # The histogram's "gave up" column: patience is 5 to 60 s.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#waits tbody tr')].slice(0, -1)"
        ".some(tr => Number(tr.children[3].textContent) > 0)",
        timeout=60_000,
    )
    activity = page.text_content("#activity") or ""
    assert "virtual visitors" in activity
    assert " · - · " not in activity  # a run concerns no one room: no room shown as "-"
