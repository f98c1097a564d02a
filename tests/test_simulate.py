"""Virtual visitors (``queuegate simulate``) against a real uvicorn: every
visitor accounted for, clear errors for URLs that are not a gated page, and
``unavailable`` waited out as the waiting page does."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator

import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from queuegate import QueueGate, Room
from queuegate.cli.parser import _parser
from queuegate.cli.simulate import _simulate
from queuegate.embedded import EmbeddedServer
from queuegate.simulate import Progress, simulate

from .conftest import SECRET, served
from .test_cli import cli


async def page(request: Request) -> Response:
    if request.url.path.startswith("/slow"):
        await asyncio.sleep(2.0)
    return PlainTextResponse("checkout")


async def broken(request: Request) -> Response:
    return HTMLResponse("<h1>502 Bad Gateway</h1>", status_code=502)


def shop(redis_url: str, rate: int = 100) -> QueueGate:
    app = Starlette(
        routes=[
            Route("/checkout", page, methods=["GET", "POST"]),
            Route("/slow", page),
            Route("/open", page),
            Route("/broken", broken),
        ]
    )
    rooms = [Room("sale", paths=["/checkout*", "/slow*"], rate=rate, per=1.0)]
    return QueueGate(app, rooms=rooms, secret_key=SECRET, redis=redis_url, environ={}, timeout=0.5)


@pytest.fixture
def base(redis_url: str) -> Iterator[str]:
    with served(shop(redis_url)) as url:
        yield url


def run(url: str, visitors: int, **options: float) -> Progress:
    progress = asyncio.run(simulate(url, visitors, give_up=0.0, **options))  # type: ignore[arg-type]
    accounted = (
        progress.admitted
        + progress.gave_up
        + progress.still_waiting
        + progress.not_started
        + progress.errors
        + progress.ungated
    )
    assert accounted == visitors, progress
    return progress


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/nothing", "the URL answered 404 Not Found"),
        ("/broken", "the answer 502 Bad Gateway is not JSON (text/html): not a queuegate answer"),
    ],
)
def test_a_url_that_is_no_gated_page_is_a_clear_error(base: str, path: str, reason: str) -> None:
    progress = run(base + path, 4, max_seconds=10)
    assert (progress.errors, progress.admitted) == (4, 0)
    (said,) = progress.reasons
    assert said.startswith(reason), said
    assert progress.reasons[said] == 4


def test_an_ungated_url_is_a_warning_not_everyone_admitted(base: str) -> None:
    progress = run(base + "/open", 5, max_seconds=10)
    assert (progress.ungated, progress.admitted, progress.errors) == (5, 0, 0)
    assert "does not look gated" in (progress.warning() or "")
    shown = cli("simulate", "--url", base + "/open", "--visitors", "3", url=None)
    assert shown.returncode == 1
    assert "queuegate: warning: 3 of 3 visitors were let through with no queuegate cookie" in shown.stderr
    assert "not gated      3 (let through with no queuegate cookie)" in shown.stdout.splitlines()
    as_json = cli("simulate", "--url", base + "/open", "--visitors", "3", "--json", url=None)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["ungated"] == 3


def test_the_summary_accounts_for_everyone_in_plain_text_and_json(base: str) -> None:
    progress = run(base + "/checkout", 6, max_seconds=10)
    assert (progress.admitted, progress.errors, progress.ungated) == (6, 0, 0)
    # One at a time, the first taking 2 s: the others never start in 1 s.
    slow = run(base + "/slow", 3, concurrency=1, max_seconds=1.0)
    assert (slow.admitted, slow.not_started) == (1, 2)
    shown = cli("simulate", "--url", base + "/nothing", "--visitors", "3", "--max-seconds", "5", url=None)
    assert shown.returncode == 1
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["visitors", "3"]
    assert "still waiting  0" in lines  # (the time limit is said only of those it stopped)
    assert "not started    0" in lines
    assert "errors         3" in lines
    assert any(line.strip().startswith("3 visitors: the URL answered 404 Not Found") for line in lines)
    summary = json.loads(
        cli("simulate", "--url", base + "/nothing", "--visitors", "3", "--json", url=None).stdout
    )
    # The keys scripts read before are all still there, with the new ones.
    assert {"visitors", "admitted", "gave_up", "errors", "limited", "wait_p50_s", "last_error"} <= set(
        summary
    )
    assert (summary["errors"], summary["still_waiting"], summary["not_started"]) == (3, 0, 0)
    assert list(summary["error_reasons"].values()) == [3]


def test_unavailable_is_waited_out_as_the_page_does(own_server: EmbeddedServer) -> None:
    """Redis away when the visitors come: the gate answers 503 unavailable
    (Retry-After 5); they come back after it instead of failing, and get
    in once Redis is back."""
    with served(shop(own_server.url)) as url:
        own_server.kill()

        async def outage() -> Progress:
            # Started from this thread: the server dies with the thread that started it.
            asyncio.get_running_loop().call_later(2.0, own_server.start)
            return await simulate(url + "/checkout", 4, give_up=0.0, max_seconds=30)

        progress = asyncio.run(outage())
    assert progress.unavailable >= 4
    assert (progress.admitted, progress.errors) == (4, 0), progress


@pytest.mark.parametrize(
    ("terminal", "extra", "bar"),
    [(True, [], True), (False, [], False), (True, ["--json"], False)],
    ids=["terminal", "piped", "json"],
)
def test_a_progress_bar_on_a_terminal_only(
    base: str, capsys: pytest.CaptureFixture[str], terminal: bool, extra: list[str], bar: bool
) -> None:
    stderr = io.StringIO()
    console = Console(file=stderr, force_terminal=terminal, width=100)
    args = _parser().parse_args(["simulate", "--url", base + "/checkout", "--visitors", "4", *extra])
    assert _simulate(args, console) == 0
    drawn = stderr.getvalue()
    if bar:
        # Drawn while the run lasts (then erased: the bar is transient).
        assert "━" in drawn, drawn
        assert re.search(r"visitors .*\d/4", drawn), drawn
    else:
        assert drawn == ""
    out = capsys.readouterr().out
    if "--json" in extra:
        assert json.loads(out)["admitted"] == 4  # the JSON alone, as before
    else:
        assert out.splitlines()[0].split() == ["visitors", "4"]
