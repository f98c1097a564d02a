"""Virtual visitors: they join a gated page and poll the way browsers do.

Each one has its own cookies, asks for the page (as JSON), waits the
``poll_after_seconds`` the gate tells it between polls of the status
endpoint, and asks for the page again when its turn comes, just as the
waiting page does. Some give up after a random patience and stop polling.
When the gate answers ``unavailable`` (its Redis away) they back off and
try again, as the page does. For demos (competing with a real person in
another tab) and load tests:

    queuegate simulate --url http://127.0.0.1:8000/checkout --visitors 500 --concurrency 100

Bounded: a run never has more than ``concurrency`` visitors at once and stops
after ``max_seconds``. Every visitor ends up counted once: admitted, gave
up, still waiting when the time was up, not started, let through by a page
that is not gated, or an error with its reason.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from .challenges import solve

__all__ = ["Progress", "VisitError", "simulate"]

COOKIE_PREFIX = "qg_"  # the rooms' cookies are qg_<room>
UNAVAILABLE_RETRY = 5.0  # seconds, when an unavailable answer names no Retry-After
MAX_BACKOFF = 30.0  # seconds: the waiting page doubles its delay up to this


class VisitError(Exception):
    """A visitor could not go on; the message is the reason, the same for
    every visitor it happens to (so the summary can count them)."""


@dataclass
class Progress:
    """Counts of a run so far; ``waits`` are seconds from arrival to admission."""

    visitors: int
    started: int = 0
    waiting: int = 0
    admitted: int = 0
    gave_up: int = 0  # their patience ran out
    still_waiting: int = 0  # in line (or waiting out a 429) when the run's time was up
    errors: int = 0
    ungated: int = 0  # let through with no queuegate cookie: the URL is not gated
    limited: int = 0  # answers 429 (client_limit), each waited out and retried
    unavailable: int = 0  # answers "unavailable" (the gate's Redis away), each retried after a back-off
    waits: list[float] = field(default_factory=list)
    last_error: str = ""
    reasons: Counter[str] = field(default_factory=Counter)  # errors by reason

    @property
    def done(self) -> int:
        return self.admitted + self.gave_up + self.still_waiting + self.errors + self.ungated

    @property
    def not_started(self) -> int:
        return self.visitors - self.started

    def error(self, reason: str) -> None:
        self.errors += 1
        self.reasons[reason] += 1
        self.last_error = reason

    def warning(self) -> str | None:
        """What makes the run's figures meaningless, if anything."""
        if not self.ungated:
            return None
        return (
            f"{self.ungated} of {self.started} visitors were let through with no queuegate cookie: "
            "the URL does not look gated (is it a path of a room?)"
        )

    def counts(self) -> str:
        """One line for a progress bar."""
        return (
            f"admitted {self.admitted}  waiting {self.waiting}  gave up {self.gave_up}  "
            f"errors {self.errors}" + (f"  not gated {self.ungated}" if self.ungated else "")
        )

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
            "still_waiting": self.still_waiting,
            "not_started": self.not_started,
            "ungated": self.ungated,
            "unavailable": self.unavailable,
            "error_reasons": dict(self.reasons.most_common()),
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
                if time.monotonic() >= deadline:
                    return  # not started
                progress.started += 1
                # Each visitor is its own browser (its own cookies) on the
                # run's shared connections; the transport outlives it.
                browser = httpx.AsyncClient(transport=transport, timeout=10.0)
                try:
                    await _Visit(browser, url, leaves, deadline, progress, leave).run()
                except VisitError as exc:
                    progress.error(str(exc))
                except httpx.HTTPError as exc:
                    progress.error(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                if on_progress is not None:
                    on_progress(progress)

        await asyncio.gather(*(one() for _ in range(visitors)))
    return progress


class _TimeUp(Exception):
    """The run's time, or the visitor's patience, ran out while waiting."""

    def __init__(self, patience: bool) -> None:
        self.patience = patience


class _Visit:
    """One visitor, from arrival to admission (or giving up)."""

    def __init__(
        self,
        browser: httpx.AsyncClient,
        url: str,
        leaves: float | None,
        deadline: float,
        progress: Progress,
        leave: bool = False,
    ) -> None:
        self.browser = browser
        self.url = url
        self.plain_http = urlsplit(url).scheme == "http"
        self.leaves = leaves
        self.leave = leave  # press "Leave the line" on giving up (else go silent)
        self.status_url = ""
        self.deadline = deadline
        self.progress = progress
        self.arrived = time.monotonic()
        self.headers = {"accept": "application/json"}

    async def run(self) -> None:
        try:
            await self._visit()
        except _TimeUp as up:
            if up.patience:
                self.progress.gave_up += 1
            else:
                self.progress.still_waiting += 1

    async def _sleep(self, pause: float) -> None:
        """Wait ``pause`` seconds, unless the run's time or the visitor's
        patience runs out first (then leave when it does)."""
        now = time.monotonic()
        if self.leaves is not None and now + pause - self.arrived >= self.leaves:
            await asyncio.sleep(max(0.0, self.arrived + self.leaves - now))
            if self.leave and self.status_url:
                # The gate's endpoints sit side by side: .../status/<room>, .../leave/<room>.
                where, room = self.status_url.rsplit("/status/", 1)
                await self.browser.post(f"{where}/leave/{room}", headers=self.headers)
            raise _TimeUp(patience=True)
        if now + pause > self.deadline:
            raise _TimeUp(patience=False)
        await asyncio.sleep(pause)

    async def _get(self, url: str) -> httpx.Response:
        """A GET, sent again once if a kept-alive connection turns out closed
        (the server timed it out as the request went: it reads as a protocol
        error or a failed read, by when the close came), as browsers do."""
        try:
            return await self.browser.get(url, headers=self.headers)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            return await self.browser.get(url, headers=self.headers)

    async def _page(self) -> httpx.Response:
        """The gated page, asked again after each 429 or unavailable answer
        (after Retry-After; unavailable ones doubling up to 30 s, as the
        waiting page's retries do)."""
        backoff = 0.0
        while True:
            response = await self._get(self.url)
            if response.status_code == 429:
                # Too many new places from this address this minute (every
                # virtual visitor comes from one): back after Retry-After, as
                # a browser behind a shared address would be.
                self.progress.limited += 1
                await self._sleep(_retry_after(response, 5.0))
            elif response.status_code == 503 and _state(response) == "unavailable":
                self.progress.unavailable += 1
                backoff = (
                    min(MAX_BACKOFF, backoff * 2) if backoff else _retry_after(response, UNAVAILABLE_RETRY)
                )
                await self._sleep(backoff)
            else:
                return response

    def _check_cookie(self, response: httpx.Response) -> bool:
        """Whether the answer set a room's cookie; a Secure one over plain
        http is an error: no client sends it back there."""
        cookies = [c for c in response.headers.get_list("set-cookie") if c.startswith(COOKIE_PREFIX)]
        if self.plain_http and any("secure" in _flags(c) for c in cookies):
            raise VisitError(
                "the gate sets a Secure cookie over plain http, which no client sends back: "
                "use an https URL, or cookie_secure=None (the default) on the gate"
            )
        return bool(cookies)

    def _admitted(self) -> None:
        self.progress.admitted += 1
        self.progress.waits.append(time.monotonic() - self.arrived)

    async def _visit(self) -> None:
        response = await self._page()
        gated = self._check_cookie(response)
        if response.status_code < 300:
            if gated:
                self._admitted()
            else:
                self.progress.ungated += 1
            return
        data = _json(response)
        if data.get("state") == "challenge":
            # A proof of work first, as the page does (in a thread: it hashes).
            payload = await asyncio.to_thread(solve, data["challenge"])
            joined = await self.browser.post(
                urljoin(self.url, data["join_url"]), json={"altcha": payload}, headers=self.headers
            )
            self._check_cookie(joined)
            data = _json(joined)
            if data.get("state") == "active":
                page = await self._page()
                if page.status_code >= 300:
                    raise VisitError(f"admitted through the challenge, then {_said(page)} for the page")
                self._admitted()
                return
        if data.get("state") not in ("waiting", "prequeue"):
            raise VisitError(f"unexpected answer {_said(response)}: state {data.get('state')!r}")
        await self._wait(data)

    async def _wait(self, data: dict[str, Any]) -> None:
        status_url = self.status_url = urljoin(self.url, data["status_url"])
        pause = float(data.get("poll_after_seconds", 5))
        self.progress.waiting += 1
        try:
            while True:
                await self._sleep(pause)
                poll = await self._get(status_url)
                data = _json(poll)
                state = data.get("state")
                if state == "unavailable":
                    self.progress.unavailable += 1
                    pause = min(MAX_BACKOFF, pause * 2)
                    continue
                if state in ("active", "pass"):
                    page = await self._page()
                    if page.status_code >= 300:
                        raise VisitError(f"admitted, then {_said(page)} for the page")
                    self._admitted()
                    return
                if state == "none":
                    raise VisitError(
                        "the gate no longer knew the visitor while it waited (state 'none'): "
                        "its cookie was not sent back"
                    )
                if state not in ("waiting", "prequeue"):
                    raise VisitError(f"unexpected state {state!r} while waiting")
                pause = float(data.get("poll_after_seconds", 5))
        finally:
            self.progress.waiting -= 1


def _flags(cookie: str) -> set[str]:
    return {part.strip().lower() for part in cookie.split(";")[1:]}


def _retry_after(response: httpx.Response, default: float) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", default)))
    except ValueError:
        return default


def _said(response: httpx.Response) -> str:
    """'404 Not Found'."""
    return f"{response.status_code} {response.reason_phrase}".strip()


def _state(response: httpx.Response) -> str | None:
    try:
        data = response.json()
    except ValueError:
        return None
    return data.get("state") if isinstance(data, dict) else None


def _json(response: httpx.Response) -> dict[str, Any]:
    """A queuegate answer as JSON, or a VisitError saying what came instead."""
    if response.status_code == 404:
        raise VisitError(f"the URL answered {_said(response)}: is it a page of the site, behind a room?")
    try:
        data = response.json()
    except ValueError:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        raise VisitError(
            f"the answer {_said(response)} is not JSON ({kind}): not a queuegate answer"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("state"), str):
        raise VisitError(f"the answer {_said(response)} is JSON with no state: not a queuegate answer")
    return data
