"""Virtual visitors: they join a gated page and poll the way browsers do.

Each one has its own cookies, asks for the page (as JSON), waits the
``poll_after_seconds`` the gate tells it between polls of the status
endpoint, and asks for the page again when its turn comes, just as the
waiting page does. Some give up after a random patience and stop polling.
For demos (competing with a real person in another tab) and load tests:

    queuegate simulate --url http://127.0.0.1:8000/checkout --visitors 500 --concurrency 100

Bounded: a run never has more than ``concurrency`` visitors at once and stops
after ``max_seconds``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx

from .challenges import solve

__all__ = ["Progress", "simulate"]


@dataclass
class Progress:
    """Counts of a run so far; ``waits`` are seconds from arrival to admission."""

    visitors: int
    started: int = 0
    waiting: int = 0
    admitted: int = 0
    gave_up: int = 0
    errors: int = 0
    limited: int = 0  # answers 429 (client_limit), each waited out and retried
    waits: list[float] = field(default_factory=list)
    last_error: str = ""
    error_reasons: dict[str, int] = field(default_factory=dict)  # reason -> how many

    @property
    def done(self) -> int:
        return self.admitted + self.gave_up + self.errors

    def summary(self) -> dict[str, Any]:
        waits = sorted(self.waits)

        def pct(p: float) -> float | None:
            return round(waits[min(len(waits) - 1, int(p * len(waits)))], 2) if waits else None

        return {
            "visitors": self.visitors,
            "admitted": self.admitted,
            "gave_up": self.gave_up,
            "errors": self.errors,
            "limited": self.limited,
            "wait_p50_s": pct(0.5),
            "wait_p90_s": pct(0.9),
            "wait_p99_s": pct(0.99),
            "wait_mean_s": round(statistics.mean(waits), 2) if waits else None,
            "last_error": self.last_error or None,
        }


async def simulate(
    url: str,
    visitors: int,
    concurrency: int = 50,
    *,
    give_up: float = 0.2,
    patience: tuple[float, float] = (5.0, 60.0),
    max_seconds: float = 600.0,
    seed: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    progress: Progress | None = None,
    leave: bool = False,
) -> Progress:
    """Run ``visitors`` virtual visitors against ``url``; a share ``give_up``
    of them leaves after a patience drawn from ``patience`` (seconds): with
    ``leave``, by pressing the page's "Leave the line" (the room counts it
    at once), else silently, as a closed tab (the room counts it once the
    visitor has been silent its ``abandon`` and reaches the front). Pass
    ``progress`` to watch the counts from elsewhere while it runs."""
    rng = random.Random(seed)
    progress = progress or Progress(visitors)
    slots = asyncio.Semaphore(concurrency)
    deadline = time.monotonic() + max_seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncHTTPTransport(limits=limits) as transport:

        async def one() -> None:
            leaves = rng.uniform(*patience) if rng.random() < give_up else None
            async with slots:
                progress.started += 1
                # Each visitor is its own browser (its own cookies) on the
                # run's shared connections; the transport outlives it.
                browser = httpx.AsyncClient(transport=transport, timeout=10.0)
                try:
                    await _visit(browser, url, leaves, deadline, progress, leave)
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    progress.errors += 1
                    progress.last_error = f"{type(exc).__name__}: {exc}"
                    reason = f"{type(exc).__name__}: {str(exc)[:120] or 'no message'}"
                    progress.error_reasons[reason] = progress.error_reasons.get(reason, 0) + 1
                if on_progress is not None:
                    on_progress(progress)

        await asyncio.gather(*(one() for _ in range(visitors)))
    return progress


async def _visit(
    browser: httpx.AsyncClient,
    url: str,
    leaves: float | None,
    deadline: float,
    progress: Progress,
    leave: bool = False,
) -> None:
    arrived = time.monotonic()
    headers = {"accept": "application/json"}
    response = await browser.get(url, headers=headers)
    while response.status_code == 429:
        # Too many new places from this address this minute (every virtual
        # visitor comes from one): back after Retry-After, as a browser
        # behind a shared address would be.
        progress.limited += 1
        pause = float(response.headers.get("retry-after", "5"))
        later = time.monotonic() + pause
        if later > deadline or (leaves is not None and later - arrived >= leaves):
            progress.gave_up += 1
            return
        await asyncio.sleep(pause)
        response = await browser.get(url, headers=headers)
    if response.status_code < 300:
        progress.admitted += 1
        progress.waits.append(0.0)
        return
    if "json" not in response.headers.get("content-type", ""):
        raise ValueError(f"{response.status_code} from the page, not the gate's JSON: is the path gated?")
    data = response.json()
    if data.get("state") == "challenge":
        # A proof of work first, as the page does (in a thread: it hashes).
        payload = await asyncio.to_thread(solve, data["challenge"])
        data = (
            await browser.post(urljoin(url, data["join_url"]), json={"altcha": payload}, headers=headers)
        ).json()
        if data.get("state") == "active":
            if (await browser.get(url, headers=headers)).status_code >= 300:
                raise ValueError("admitted through the challenge, then refused the page")
            progress.admitted += 1
            progress.waits.append(time.monotonic() - arrived)
            return
    if data.get("state") not in ("waiting", "prequeue"):
        raise ValueError(f"unexpected answer {response.status_code}: {data.get('state')}")
    status_url = urljoin(url, data["status_url"])
    progress.waiting += 1
    try:
        while True:
            pause = float(data.get("poll_after_seconds", 5))
            now = time.monotonic()
            if leaves is not None and now + pause - arrived >= leaves:
                await asyncio.sleep(max(0.0, arrived + leaves - now))
                if leave:  # the gate's endpoints sit side by side: .../status/<room>, .../leave/<room>
                    where, room = status_url.rsplit("/status/", 1)
                    await browser.post(f"{where}/leave/{room}", headers=headers)
                progress.gave_up += 1
                return
            if now + pause > deadline:
                progress.gave_up += 1
                return
            await asyncio.sleep(pause)
            poll = await browser.get(status_url, headers=headers)
            data = poll.json()
            if data["state"] in ("active", "pass"):
                page = await browser.get(url, headers=headers)
                if page.status_code >= 300:
                    raise ValueError(f"admitted, then {page.status_code} for the page")
                progress.admitted += 1
                progress.waits.append(time.monotonic() - arrived)
                return
            if data["state"] not in ("waiting", "prequeue"):
                raise ValueError(f"unexpected state {data['state']!r} while waiting")
    finally:
        progress.waiting -= 1
