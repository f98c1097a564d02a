"""Every page the gate serves, checked in a real browser: axe-core (WCAG 2.x
A and AA rules, through axe-playwright-python) in light and dark colour
schemes, reflow at 320 CSS pixels (what 400 % zoom leaves of a 1280 px
window) without sideways scrolling, and no motion for visitors who ask for
less of it.

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from queuegate import QueueGate, Room

from .conftest import PATIENT, SECRET, call_asgi, chromium_or_skip, http_scope, ok_app

CHROMIUM = chromium_or_skip()

from axe_playwright_python.sync_playwright import Axe  # noqa: E402
from playwright.sync_api import Browser  # noqa: E402

WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


def gate_pages(redis_url: str, accept_language: str = "en") -> dict[str, str]:
    """The HTML of every page the gate answers with, from a real gate, in
    the language a visitor asks for."""

    async def collect() -> dict[str, str]:
        rooms = [
            Room("sale", paths=["/checkout*"], rate=1, per=3600, client_limit=1, title="Summer sale"),
            Room("drop", paths=["/drop*"], rate=1, opens_at=time.time() + 3600, title="Sneaker drop"),
            Room("gone", paths=["/gone*"], rate=1, status="closed"),
            Room("human", paths=["/human*"], rate=1, challenge=1000, title="Ticket drop"),
            Room("plain", paths=["/plain*"], rate=1, per=3600),  # no title: its page shows none
        ]
        gate = QueueGate(ok_app, rooms=rooms, secret_key=SECRET, redis=redis_url, environ={}, timeout=PATIENT)
        down = QueueGate(ok_app, rooms=rooms, secret_key=SECRET, redis="redis://127.0.0.1:1/0", environ={})
        pages: dict[str, str] = {}

        async def html(
            app: QueueGate, path: str, method: str = "GET", client: str = "192.0.2.1", **extra: Any
        ) -> str:
            scope = http_scope(path, method=method, **extra)
            scope["headers"].append((b"accept-language", accept_language.encode()))
            scope["client"] = (client, 5000)
            status, headers, body = await call_asgi(app, scope)
            assert headers["content-type"].startswith("text/html"), (path, status)
            return body.decode()

        try:
            await call_asgi(gate, http_scope("/checkout"))  # the hour's one place
            pages["waiting"] = await html(gate, "/checkout", client="192.0.2.2")
            pages["limited"] = await html(gate, "/checkout", client="192.0.2.2")  # its one new place a minute
            await call_asgi(gate, http_scope("/plain"))
            pages["untitled"] = await html(gate, "/plain", client="192.0.2.3")
            pages["prequeue"] = await html(gate, "/drop")
            pages["closed"] = await html(gate, "/gone")
            pages["challenge"] = await html(gate, "/human")
            pages["unavailable"] = await html(down, "/checkout")
            pages["not_found"] = await html(gate, "/_queuegate/leave/nowhere", method="POST")
            pages["left"] = await html(gate, "/_queuegate/leave/sale", method="POST")
            cross = [(b"origin", b"https://evil.example")]
            pages["cross_site"] = await html(gate, "/_queuegate/leave/sale", method="POST", headers=cross)
        finally:
            await gate.store.aclose()
            await down.store.aclose()
        return pages

    # In a thread of its own: Playwright's sync API runs an event loop here.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, collect()).result()


# English in both schemes at both widths; Korean and Arabic (right to left)
# in one combination each of the others.
Scheme = Literal["light", "dark"]
RUNS: list[tuple[str, Scheme, int]] = [
    ("en", "light", 320),
    ("en", "light", 1280),
    ("en", "dark", 320),
    ("en", "dark", 1280),
]
RUNS += [("ko", "light", 320), ("ko", "dark", 1280), ("ar", "light", 320), ("ar", "dark", 1280)]


def test_every_page_passes_axe_and_reflows_at_400_percent(redis_url: str, browser: Browser) -> None:
    by_language = {code: gate_pages(redis_url, code) for code in ("en", "ko", "ar")}
    assert all(len(pages) == 10 for pages in by_language.values())
    axe = Axe()
    failures = []
    for code, scheme, width in RUNS:
        pages = by_language[code]
        context = browser.new_context(
            viewport={"width": width, "height": 800}, color_scheme=scheme, bypass_csp=True
        )
        page = context.new_page()
        for name, html in pages.items():
            page.set_content(html)
            results = axe.run(page, options={"runOnly": {"type": "tag", "values": WCAG_AA}})
            for violation in results.response["violations"]:
                where = [node["target"] for node in violation["nodes"]]
                failures.append(f"{name} ({code}, {scheme}, {width}px): {violation['id']}: {where}")
            if width == 320:
                overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                if overflow > 0:
                    failures.append(f"{name} ({code}, {scheme}): scrolls sideways by {overflow}px at 320px")
        context.close()
    assert not failures, "\n".join(failures)


def test_no_motion_for_those_who_ask_for_less(redis_url: str, browser: Browser) -> None:
    html = gate_pages(redis_url)["waiting"]
    motions: tuple[tuple[Literal["no-preference", "reduce"], bool], ...] = (
        ("no-preference", True),
        ("reduce", False),
    )
    for motion, moving in motions:
        context = browser.new_context(reduced_motion=motion, bypass_csp=True)
        page = context.new_page()
        page.set_content(html)
        animations = page.evaluate("document.getAnimations().length")
        assert (animations > 0) == moving, motion
        context.close()


def test_the_waiting_pages_sign_of_life_is_not_a_progress_bar(redis_url: str, browser: Browser) -> None:
    """A segment sliding in a track read as a progress bar stuck at 30 %. The
    sign is three equal dots, hidden from screen readers, and nothing on the
    page claims a share done."""
    html = gate_pages(redis_url)["waiting"]
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.set_content(html)
    hidden, sizes = page.evaluate(
        """() => {
          const sign = document.querySelector(".dots");
          const sizes = [...sign.children].map(d => [d.offsetWidth, d.offsetHeight]);
          return [sign.getAttribute("aria-hidden"), sizes];
        }"""
    )
    assert hidden == "true"
    assert len(sizes) == 3
    assert len({tuple(size) for size in sizes}) == 1
    assert sizes[0][0] > 0
    assert page.locator("progress, [role=progressbar], .bar").count() == 0
    context.close()


def test_the_last_update_is_told_in_the_pages_language_on_the_visitors_clock(
    redis_url: str, browser: Browser
) -> None:
    # Before: the script wrote the time in the browser's own language, so an
    # Arabic page in an English browser said "10:41:07 PM".
    pages = gate_pages(redis_url, "ar")
    context = browser.new_context(locale="en-US", timezone_id="Asia/Tokyo", bypass_csp=True)
    for name in ("waiting", "prequeue"):
        page = context.new_page()
        page.set_content(pages[name])
        told = page.evaluate(
            """() => {
              const at = document.getElementById("qg-updated");
              const when = new Date(at.getAttribute("datetime"));
              return [at.textContent, when.toLocaleTimeString("ar", {timeZone: "Asia/Tokyo"}),
                      Date.now() - when.getTime()];
            }"""
        )
        text, expected, age_ms = told
        assert text == expected, name
        assert not any(mark in text for mark in ("AM", "PM", "UTC")), (name, text)
        assert 0 <= age_ms < 60_000, name
        page.close()
    context.close()
