"""The quickstarts in docs/snippets/ (shown in the README and the docs) run as
written, against a real Redis and a real uvicorn: the first visitor to the
checkout is admitted and keeps passing, the second waits in line.

Each snippet's docstring names the command that serves it
(``uvicorn module:attribute``); Starlette and FastAPI are imported and served
in this process, Django in a process of its own (its settings are global to
a process, and other tests configure them their own way).
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import redis.asyncio

from queuegate import ConfigError, QueueGate, Store
from queuegate.embedded import free_port

from .conftest import SECRET, client_for, served, wait_for_http

SNIPPETS = Path(__file__).resolve().parent.parent / "docs" / "snippets"
QUICKSTARTS = ["starlette_app.py", "fastapi_app.py", "django_app.py"]


def serve_command(name: str) -> tuple[str, str]:
    """The module and attribute a snippet's docstring says to serve."""
    found = re.search(r"uvicorn (\w+):(\w+)", (SNIPPETS / name).read_text())
    assert found is not None, f"{name}: its docstring names no 'uvicorn module:attribute' command"
    assert found.group(1) == name.removesuffix(".py")
    return found.group(1), found.group(2)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"snippet_{name.removesuffix('.py')}", SNIPPETS / name)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def environment(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What the quickstarts read, under the gate's own names only: a secret
    and this test's Redis."""
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("QUEUEGATE_SECRET_KEY", SECRET)
    monkeypatch.setenv("QUEUEGATE_REDIS_URL", redis_url)
    return redis_url


def test_the_snippets_read_only_the_gate_s_own_variables() -> None:
    """One name per setting: the quickstarts read SECRET_KEY while the gate
    reads QUEUEGATE_SECRET_KEY, so setting only the gate's crashed them."""
    for path in SNIPPETS.glob("*.py"):
        names = re.findall(r"os\.environ(?:\.get)?[\[(]\"(\w+)\"", path.read_text())
        assert names, path.name
        assert all(name.startswith("QUEUEGATE_") for name in names), (path.name, names)


def test_a_quickstart_without_its_secret_says_which_variable_to_set(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run with no secret in the environment, a quickstart stopped at its
    first line with a bare ``KeyError: 'QUEUEGATE_SECRET_KEY'``; the gate
    reads the variable itself and says what to set, and how to make one."""
    monkeypatch.delenv("QUEUEGATE_SECRET_KEY", raising=False)
    monkeypatch.setenv("QUEUEGATE_REDIS_URL", redis_url)
    with pytest.raises(ConfigError, match=r"set QUEUEGATE_SECRET_KEY .*secrets\.token_urlsafe\(32\)"):
        load("fastapi_app.py")


def first_admitted_second_waits(base: str, page: str) -> None:
    with httpx.Client(base_url=base) as first, httpx.Client(base_url=base) as second:
        admitted = first.get("/checkout")
        assert admitted.status_code == 200, admitted.text
        assert page in admitted.text
        # The cookie is Secure: a browser sends it to http://localhost, httpx
        # does not, so it goes by hand. The admitted visitor passes again.
        cookie = admitted.cookies["qg_sale"]
        again = first.get("/checkout", headers={"cookie": f"qg_sale={cookie}"})
        assert again.status_code == 200
        assert page in again.text

        waiting = second.get("/checkout", headers={"accept": "application/json"})
        assert waiting.status_code == 503
        assert waiting.json()["state"] == "waiting"
        assert waiting.json()["position"] == 1
        # The same visitor's page (their cookie by hand again): still waiting.
        cookie = waiting.cookies["qg_sale"]
        page_html = second.get("/checkout", headers={"cookie": f"qg_sale={cookie}"})
        assert page_html.status_code == 503
        assert "text/html" in page_html.headers["content-type"]
        assert page not in page_html.text


def test_every_snippet_is_a_quickstart_tested_here_or_the_operating_one() -> None:
    assert sorted(path.name for path in SNIPPETS.glob("*.py")) == sorted([*QUICKSTARTS, "operate.py"])


def test_starlette_quickstart_and_operating_its_room_with_a_store(
    environment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, attribute = serve_command("starlette_app.py")
    module = load("starlette_app.py")
    # The room covers the checkout and what is under it, not every path
    # that starts alike: a copied `/checkout*` gated a shop's /checkout-help.
    (middleware,) = module.app.user_middleware
    gate = QueueGate(module.app, **middleware.kwargs)
    covered = [gate.match(path) is not None for path in ("/checkout", "/checkout/pay", "/checkout-help")]
    assert covered == [True, True, False]
    with served(getattr(module, attribute)) as base:
        first_admitted_second_waits(base, "Your turn: checkout")

    # add_middleware builds the gate inside Starlette: a Store on the same
    # Redis operates the room.
    load("operate.py")  # a script: it runs when loaded
    printed = re.fullmatch(r"waiting (\d+), active (\d+), admitted (\d+)\n", capsys.readouterr().out)
    assert printed is not None
    waiting, active, admitted = map(int, printed.groups())
    # Both visitors of the gate's room; the second is let in only if a
    # refill came meanwhile (10 s on a very slow machine).
    assert (waiting, active) in ((1, 1), (0, 2))
    assert admitted == active
    assert asyncio.run(room_setting(environment, "rate")) == 5


async def room_setting(url: str, name: str) -> object:
    store = Store(redis.asyncio.Redis.from_url(url))
    try:
        return (await store.stats("sale"))[name]
    finally:
        await store.aclose()


def test_fastapi_quickstart(environment: str) -> None:
    _, attribute = serve_command("fastapi_app.py")
    module = load("fastapi_app.py")
    assert attribute == "gate"
    with served(module.gate) as base:
        first_admitted_second_waits(base, '"checkout":"your turn"')


@pytest.mark.anyio
async def test_fastapi_quickstart_inner_app_served_alone_fails_loudly(environment: str) -> None:
    module = load("fastapi_app.py")
    async with client_for(module.app) as client:
        with pytest.raises(RuntimeError, match="no QueueGate middleware is in front"):
            await client.get("/checkout")


@pytest.fixture
def django_served(environment: str, tmp_path: Path) -> Iterator[str]:
    module_name, attribute = serve_command("django_app.py")
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", f"{module_name}:{attribute}", "--port", str(port)]
    errors = tmp_path / "stderr"
    with errors.open("wb") as stderr:
        process = subprocess.Popen([*command, "--log-level", "warning"], cwd=SNIPPETS, stderr=stderr)
    try:
        try:
            wait_for_http(f"http://127.0.0.1:{port}/")
        except AssertionError:
            pytest.fail(f"the Django quickstart did not start: {errors.read_text()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def test_django_quickstart(django_served: str) -> None:
    first_admitted_second_waits(django_served, "Your turn: checkout")
