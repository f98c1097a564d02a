"""The back office reads as finished as the visitors' waiting page: its
sign-in a card with fields a finger can press (Playwright + Debian's
Chromium).

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

from typing import Any

from queuegate import Store
from queuegate.store import connect

from .conftest import chromium_or_skip

chromium_or_skip()

from .test_admin_browser import signed_in  # noqa: E402

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
