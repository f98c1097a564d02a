"""The demo's adaptive checkout, slowed down and sped up again, as an operator
sees it: the rate the controller sets, every few seconds, and a picture of
the back office.

    python -m benchmarks.demo_loop [--target-ms 300] [--slow-ms 800] [--picture docs/adaptive-loop.png]

Runs ``python -m demo_app --target-ms ...`` (its own embedded Redis), signs
in to its back office in headless Chromium (Debian's), launches virtual
visitors on ``/checkout``, and after 45 s turns on the shop's switch that
slows the checkout by ``--slow-ms``; 75 s later it turns it off, and 75 s
after that it writes the picture. Prints the room's rate, p95 and last
decision every 5 s. Needs the ``test`` extra (Playwright) and ``chromium``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from queuegate.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "demo-loop-token"
PHASES = (("fast", 45, 0), ("slow", 75, None), ("fast again", 75, 0))  # name, seconds, extra ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.demo_loop", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--target-ms", type=int, default=300)
    parser.add_argument("--slow-ms", type=int, default=800)
    parser.add_argument("--picture", default=str(ROOT / "docs" / "adaptive-loop.png"))
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium")
    if chromium is None:
        print("needs Debian's chromium (apt-get install chromium)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "demo_app", "--port", str(port), "--rate", "4", "--per", "1",
               "--target-ms", str(args.target_ms), "--admin-token", TOKEN]  # fmt: skip
    demo = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/checkout")  # the room exists from its first visit
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the demo did not start") from None
                time.sleep(0.2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{base}/admin-login?token={TOKEN}")
            page.wait_for_selector("tr[data-room=checkout]")
            cookies = {c["name"]: c["value"] for c in page.context.cookies()}
            csrf = cookies["queuegate_admin_csrf"]

            def post(path: str, body: dict[str, Any]) -> None:
                headers = {"x-csrf-token": csrf}
                answer = httpx.post(base + path, json=body, headers=headers, cookies=cookies, timeout=10)
                answer.raise_for_status()

            post("/admin/api/simulate", {"visitors": 3000, "path": "/checkout", "give_up": 0.0})
            page.locator("tr[data-room=checkout] button", has_text="checkout").click()
            page.wait_for_selector("#health-figure:not([hidden])")
            started = time.monotonic()
            elapsed = 0
            print(f"{'s':>4} {'checkout':>10} {'rate/s':>7} {'p95 ms':>7} {'waiting':>8}  last decision")
            for name, seconds, extra in PHASES:
                post("/shop-admin/api/slow", {"ms": args.slow_ms if extra is None else extra})
                for _ in range(seconds // 5):
                    elapsed += 5
                    page.wait_for_timeout(max(0.0, started + elapsed - time.monotonic()) * 1000)
                    rooms = httpx.get(base + "/admin/api/rooms", cookies=cookies, timeout=10).json()["rooms"]
                    room = rooms[0]
                    print(
                        f"{elapsed:>4} {name:>10} {room['rate']:>7} {room['p95_ms']:>7} "
                        f"{room['waiting']:>8}  {room['health_reason']}",
                        flush=True,
                    )
            page.evaluate("() => document.activeElement.blur()")
            page.screenshot(path=args.picture, clip={"x": 0, "y": 0, "width": 1280, "height": 700})
            browser.close()
        print(f"picture: {args.picture}")
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
