"""A room that asks a proof of work, in Chromium over a real server: the page
solves the challenge by itself, takes its place and shows the line, in Korean
and in Arabic; without JavaScript it says that JavaScript is needed.

Skipped without Chromium, unless QGDEV_E2E=required (.ci/run)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from queuegate import QueueGate, Room
from queuegate.challenges import solve

from .conftest import PATIENT, SECRET, chromium_or_skip, lifespan_app, served

CHROMIUM = chromium_or_skip()

from playwright.sync_api import Browser  # noqa: E402

DIFFICULTY = 20_000


@pytest.fixture
def shop(redis_url: str) -> Iterator[str]:
    room = Room("sale", paths=["/checkout*"], capacity=1, client_limit=0, challenge=DIFFICULTY)
    gate = QueueGate(
        lifespan_app,
        rooms=[room],
        secret_key=SECRET,
        redis=redis_url,
        cookie_secure=False,
        environ={},
        timeout=PATIENT,
    )
    with served(gate) as base:
        # Someone is inside already (through the challenge, as a JSON client
        # would): whoever comes next waits.
        with httpx.Client(base_url=base, headers={"accept": "application/json"}) as holder:
            payload = solve(holder.get("/checkout").json()["challenge"])
            assert holder.post("/_queuegate/join/sale", json={"altcha": payload}).json()["state"] == "active"
        yield base


@pytest.mark.parametrize(("locale", "lang", "direction"), [("ko-KR", "ko", "ltr"), ("ar-EG", "ar", "rtl")])
def test_the_page_solves_the_challenge_and_takes_its_place(
    shop: str, browser: Browser, locale: str, lang: str, direction: str
) -> None:
    context = browser.new_context(locale=locale)
    page = context.new_page()
    joins: list[str] = []
    page.on("request", lambda request: joins.append(request.url) if "/join/" in request.url else None)
    page.goto(shop + "/checkout")
    # The waiting page, after the challenge page solved and joined.
    page.wait_for_selector("#qg-position", timeout=60_000)
    assert page.evaluate("document.documentElement.lang") == lang
    assert page.evaluate("document.documentElement.dir") == direction
    assert page.text_content("#qg-position") in ("1", "\u0661")  # Arabic-Indic one
    assert joins == [shop + "/_queuegate/join/sale"]
    assert any(cookie["name"] == "qg_sale" for cookie in context.cookies())
    context.close()


def test_without_javascript_the_page_says_it_is_needed(shop: str, browser: Browser) -> None:
    context = browser.new_context(locale="ko-KR", java_script_enabled=False)
    page = context.new_page()
    page.goto(shop + "/checkout")
    assert "JavaScript" in page.inner_text("main")
    assert "JavaScript를 켜고" in page.inner_text("main")  # the Korean text, shown
    assert not any(cookie["name"] == "qg_sale" for cookie in context.cookies())
    context.close()
