"""What a room's proof of work costs a visitor's browser and an attacker.

    python -m benchmarks.challenge [--runs 5] [--difficulties 10000,50000,...] [--json]

A gated uvicorn worker (as in ``python -m benchmarks``) with a room that asks
a challenge before each place. For each difficulty, Chromium (headless, from
the system) opens the gated page in a fresh context: the challenge page
solves, posts its proof and loads the page again; the time to solve is what
the page itself measured (``took`` in the posted proof). "Desktop" is this
machine's Chromium as it is; "phone" is the same with its CPU slowed 4x
(Chrome's own emulation of a mid-range phone, as Lighthouse's mobile runs).
The attacker is one core of this machine hashing with OpenSSL through
``hashlib`` (the ALTCHA solver's loop, salt state copied once): the core-hours
to take 10,000 places follow from its rate.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import shutil
import statistics
import time
from typing import Any

import httpx

from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.store import Store, connect

from .speed import uvicorn_server

ROOM = "bench-human"
PHONE_SLOWDOWN = 4
PLACES = 10_000


async def set_difficulty(redis_url: str, difficulty: int) -> None:
    store = Store(connect(redis_url, 5.0))
    try:
        await store.configure(ROOM, challenge=difficulty)
    finally:
        await store.aclose()


def browser_solves(base: str, difficulty: int, runs: int, slowdown: int) -> list[float]:
    """Seconds the page took to solve, one per run (a fresh browser context each)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium")
    took: list[float] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic"],
        )
        try:
            for _ in range(runs):
                context = browser.new_context()
                page = context.new_page()
                if slowdown > 1:
                    session = context.new_cdp_session(page)
                    session.send("Emulation.setCPUThrottlingRate", {"rate": slowdown})
                with page.expect_request(lambda r: "/join/" in r.url, timeout=600_000) as joining:
                    page.goto(f"{base}/human")
                posted = joining.value.post_data or ""
                page.wait_for_selector("pre", timeout=60_000)  # the app's plain-text answer
                proof = json.loads(base64.b64decode(json.loads(posted)["altcha"]))
                took.append(proof["took"] / 1000)
                context.close()
        finally:
            browser.close()
    return took


def attacker_rate(seconds: float = 2.0) -> float:
    """SHA-256 of ``salt + n`` per second on one core, as a tuned solver does it."""
    salt = hashlib.sha256(b"salt").hexdigest()[:24] + "?expires=1&room=sale&difficulty=1&"
    prefix = hashlib.sha256(salt.encode())
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(10_000):
            h = prefix.copy()
            h.update(str(n).encode())
            h.digest()
            n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(values), 2),
        "max_s": round(max(values), 2),
        "runs": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.challenge", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--difficulties", default="10000,50000,100000,250000,500000,1000000")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    difficulties = [int(d) for d in args.difficulties.split(",")]
    rate = attacker_rate()
    rows: list[dict[str, Any]] = []
    with EmbeddedServer(server_binary("path")) as server, uvicorn_server("gated", server.url) as gated:
        base = f"http://127.0.0.1:{gated.port}"
        httpx.get(f"{base}/human")  # the room's first call: Redis learns its settings
        for difficulty in difficulties:
            asyncio.run(set_difficulty(server.url, difficulty))
            desktop = browser_solves(base, difficulty, args.runs, 1)
            phone = browser_solves(base, difficulty, args.runs, PHONE_SLOWDOWN)
            hashes = PLACES * difficulty / 2  # expected: the secret number is uniform
            rows.append(
                {
                    "difficulty": difficulty,
                    "desktop": summary(desktop),
                    "phone": summary(phone),
                    "browser_hashes_per_s": round(difficulty / 2 / statistics.mean(desktop)),
                    "attacker_core_hours_for_10000_places": round(hashes / rate / 3600, 3),
                }
            )
    report = {"attacker_hashes_per_s_per_core": round(rate), "places": PLACES, "rows": rows}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"attacker: {rate:,.0f} SHA-256 a second on one core (hashlib, OpenSSL)")
    print(
        f"{'difficulty':>10}  {'desktop median':>14}  {'desktop max':>11}  {'phone median':>12}  "
        f"{'phone max':>9}  {'core-hours for 10,000 places':>28}"
    )
    for row in rows:
        desktop, phone = row["desktop"], row["phone"]
        print(
            f"{row['difficulty']:>10,}  {desktop['median_s']:>13.2f}s  {desktop['max_s']:>10.2f}s  "
            f"{phone['median_s']:>11.2f}s  {phone['max_s']:>8.2f}s  "
            f"{row['attacker_core_hours_for_10000_places']:>28.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
