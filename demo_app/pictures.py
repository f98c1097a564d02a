"""Retake the pictures in the README and the docs from today's demo.

    python -m demo_app.pictures [--minutes 3.5] [--out docs]

Starts the demo as the README does (``python -m demo_app``, its own embedded
Redis, on a free port), drives it with headless Chromium (Debian's, through
Playwright: the ``test`` extra) and writes:

- ``waiting-page.png``, ``waiting-page-ko.png``, ``waiting-page-ar.png``: the
  checkout's waiting page in English, Korean and Arabic, second in line
  (430 px wide, drawn at twice the pixels);
- ``back-office.png``: the back office (1280 px wide, drawn in 1120 pixels)
  half a minute after launching 60 virtual visitors, 30 % of whom give up;
- ``admin-dashboard.png``: the same room ``--minutes`` later, when the
  minute-by-minute charts and the histograms of waits have filled in, after
  an operator's change of rate.

PNGs are made smaller with Pillow when it is installed (a palette of 256
colours); without it they are written as Chromium draws them. The Korean
page needs a Korean font (Debian: fonts-nanum or fonts-noto-cjk).
"""

from __future__ import annotations

import argparse
import io
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from queuegate.embedded import free_port

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "demo-pictures-token"
WAITING = (("waiting-page.png", "en-US"), ("waiting-page-ko.png", "ko-KR"), ("waiting-page-ar.png", "ar"))
PHONE: ViewportSize = {"width": 430, "height": 780}
# The back office as on a 1280 px screen, drawn 1120 px wide.
DESK: ViewportSize = {"width": 1280, "height": 900}
DESK_SCALE = 0.875
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo_app.pictures", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=3.5, help="how long the visitors run before the last picture"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the pictures go (docs/)")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs Debian's chromium (apt-get install chromium)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "demo_app", "--port", str(port), "--admin-token", TOKEN],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for(base + "/")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            for name, locale in WAITING:
                _save(_waiting_page(browser, base, locale), args.out / name)
            office = browser.new_page(viewport=DESK, device_scale_factor=DESK_SCALE)
            office.goto(f"{base}/admin-login?token={TOKEN}")
            office.wait_for_selector("tr[data-room=checkout]")
            office.locator("tr[data-room=checkout] button", has_text="checkout").click()
            # 60 virtual visitors, as a newcomer launches them from the form.
            office.fill("#sim-visitors", "60")
            office.locator("#sim-form button[type=submit]").click()
            office.wait_for_selector("#sim-status:has-text('running')")
            # A few buyers in a ticket room: two rooms in the table.
            for _ in range(2):
                httpx.get(base + "/tickets/jazz-night/buy", timeout=10)
            office.wait_for_timeout(30_000)
            _save(_page_picture(office), args.out / "back-office.png")
            # An operator's change, for the activity lists.
            office.fill("#settings input[name=rate]", "3")
            office.locator("#settings button[type=submit]").click()
            office.wait_for_timeout(max(0.0, args.minutes * 60 - 30) * 1000)
            _save(_page_picture(office), args.out / "admin-dashboard.png")
            browser.close()
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(10)
    return 0


def _wait_for(url: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=5)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError("the demo did not start") from None
            time.sleep(0.2)


def _waiting_page(browser: Browser, base: str, locale: str) -> bytes:
    """The checkout's waiting page in ``locale``, second in line with one
    person ahead. Visitors without a browser take the free places and the
    first place in line; a line that moves in between is tried again."""
    for _ in range(10):
        _until_the_line_is_empty(base)
        ahead = None
        for _ in range(10):  # the bucket holds at most a rate's worth
            visitor = httpx.Client(base_url=base, headers={"accept": "application/json"}, timeout=10)
            if visitor.get("/checkout").status_code == 503:
                ahead = visitor
                break
            visitor.close()
        if ahead is None:
            continue
        context = browser.new_context(viewport=PHONE, device_scale_factor=2, locale=locale)
        page = context.new_page()
        page.goto(base + "/checkout")
        page.wait_for_timeout(1500)  # the page's script shows the alerts' controls
        status = page.request.get(base + "/_queuegate/status/checkout").json()
        picture: bytes = page.screenshot()
        context.close()
        ahead.close()
        if status.get("state") == "waiting" and status.get("position") == 2:
            return picture
    raise RuntimeError("could not catch the line with one person ahead")


def _until_the_line_is_empty(base: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rooms = httpx.get(
            base + "/admin/api/rooms", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
        ).json()["rooms"]
        if all(room["waiting"] == 0 for room in rooms if room["room"] == "checkout"):
            return
        time.sleep(1)
    raise RuntimeError("the checkout's line did not empty")


def _page_picture(page: Page) -> bytes:
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.wait_for_timeout(2500)  # the next refresh of the charts
    picture: bytes = page.screenshot(full_page=True)
    return picture


def _save(picture: bytes, path: Path) -> None:
    """``picture`` to ``path``, in 256 colours when Pillow is there."""
    try:
        from PIL import Image
    except ImportError:
        path.write_bytes(picture)
    else:
        image = Image.open(io.BytesIO(picture)).convert("RGB")
        image.quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    print(f"{path}: {path.stat().st_size // 1024} KB", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
