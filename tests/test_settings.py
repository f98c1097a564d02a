"""Broken settings fail at start-up, naming the setting."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from queuegate import ConfigError, Health, QueueGate, Room, Settings
from queuegate.options import KNOWN_VARIABLES

from .conftest import SECRET, ok_app, uvicorn_get

ROOM = Room("sale", paths=["/checkout*"], rate=2, per=10)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"name": "bad name!", "paths": ["/x"], "rate": 1}, "Room name"),
        ({"name": "sale", "paths": "/checkout", "rate": 1}, "paths"),
        ({"name": "sale", "paths": ["checkout"], "rate": 1}, "start with '/'"),
        ({"name": "sale", "paths": ["/x"]}, "rate"),
        ({"name": "sale", "paths": ["/x"], "rate": -1}, "rate"),
        ({"name": "sale", "paths": ["/x"], "rate": 1.5}, "rate"),
        ({"name": "sale", "paths": ["/x"], "rate": 1, "per": 0}, "per"),
        ({"name": "sale", "paths": ["/x"], "rate": 1, "per": float("nan")}, "per"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "session": -5}, "session"),
        # Before forget's default (from the longest of these) was worked out from them.
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "session": "600"}, "session must be"),
        ({"name": "sale", "paths": ["/x"], "rate": 1, "per": "60"}, "per must be"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "abandon": None}, "abandon must be"),
        # A page asks every second at the quickest: one still there was skipped.
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "abandon": 2.0}, r"abandon must be 0 \(never"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "abandon": 0.0001}, "or at least 3 s"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "sliding": "yes"}, "sliding"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "fail": "maybe"}, "fail"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "status": "ajar"}, "status"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "methods": "GET"}, "methods"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "open_methods": "OPTIONS"}, "open_methods"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "open_methods": ["GET POST"]}, "open_methods"),
        ({"name": "sale", "paths": ["/x"], "capacity": 1, "open_methods": [None]}, "open_methods"),
        (
            {"name": "sale", "paths": ["/x"], "capacity": 1, "open_methods": ["GET"], "methods": ["POST"]},
            "not both",
        ),
    ],
)
def test_bad_room_settings(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Room(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"p95_ms": 0}, "Health: p95_ms must be"),
        ({"p95_ms": 400, "max_error_rate": 2}, "Health: max_error_rate must be a share between 0 and 1"),
        ({"p95_ms": 400, "floor": 0}, "Health: floor must be"),
        ({"p95_ms": 400, "ceiling": -1}, "Health: ceiling must be"),
        ({"p95_ms": 400, "ceiling": ""}, "Health: ceiling must be a whole number >= 0, got ''"),
        ({"p95_ms": 400, "ceiling": False}, "Health: ceiling must be a whole number >= 0, got False"),
        ({"p95_ms": 400, "floor": 5, "ceiling": 2}, "Health: ceiling 2 is below the floor 5"),
        ({"p95_ms": 400, "ceiling": 0}, "Health: ceiling 0 is below the floor 1 (None: no ceiling)"),
        ({"p95_ms": 400, "signal": "server"}, "Health: signal must be"),
        ({"p95_ms": 400, "settle": 0}, "Health: settle must be"),
    ],
)
def test_a_bad_health_target_names_the_argument_as_given(kwargs: dict[str, Any], said: str) -> None:
    """``max_error_rate=2`` was said as ``max_errors`` (the console's name)."""
    with pytest.raises(ConfigError) as raised:
        Health(**kwargs)
    assert said in str(raised.value)
    assert "max_errors" not in str(raised.value)


def test_a_bad_target_in_the_environment_names_the_argument_as_given() -> None:
    room = {"name": "x", "paths": ["/x"], "rate": 1, "target": {"p95_ms": 400, "max_error_rate": 2}}
    environ = {"QUEUEGATE_SECRET_KEY": SECRET, "QUEUEGATE_ROOMS": json.dumps([room])}
    with pytest.raises(ConfigError) as raised:
        Settings.load(environ)
    assert "QUEUEGATE_ROOMS: Health: max_error_rate must be a share between 0 and 1" in str(raised.value)


def test_missing_secret_and_redis_name_their_settings() -> None:
    with pytest.raises(ConfigError, match="QUEUEGATE_SECRET_KEY"):
        QueueGate(ok_app, rooms=[ROOM], redis="redis://localhost", environ={})
    with pytest.raises(ConfigError, match="QUEUEGATE_REDIS_URL"):
        QueueGate(ok_app, rooms=[ROOM], secret_key=SECRET, environ={})
    with pytest.raises(ConfigError, match="at least 16"):
        QueueGate(ok_app, rooms=[ROOM], secret_key="short", redis="redis://x", environ={})
    with pytest.raises(ConfigError, match="QUEUEGATE_ROOMS"):
        QueueGate(ok_app, secret_key=SECRET, redis="redis://x", environ={})
    with pytest.raises(ConfigError, match=r"QUEUEGATE_REDIS_URL\) must start with redis://"):
        QueueGate(ok_app, rooms=[ROOM], secret_key=SECRET, redis="http://x", environ={})


MIDDLEWARE_APP = """
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from queuegate import QueueGate, Room

app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("home"))])
app.add_middleware(QueueGate, rooms=[Room("sale", paths=["/checkout*"], rate=2, per=10)],
                   secret_key="changeme", redis="redis://127.0.0.1:1/0")
"""


def test_a_wrong_setting_under_uvicorns_default_lifespan_is_said_in_its_log(tmp_path: Path) -> None:
    """Starlette makes an ``add_middleware`` gate at the lifespan's startup,
    and uvicorn's default ``--lifespan auto`` takes an error there for a
    lifespan not supported: the server starts, and each request answers
    500. The gate's log says which setting is wrong, and what to do."""
    (tmp_path / "wrong.py").write_text(MIDDLEWARE_APP)
    status, log = uvicorn_get(tmp_path, "wrong:app", "/")
    assert status == 500
    assert "lifespan' protocol appears unsupported" in log  # uvicorn's own word for it
    said = [line for line in log.splitlines() if line.startswith("queuegate: the gate did not start")]
    assert said, log
    assert "secret_key" in said[0]
    assert "at least 16" in said[0]
    assert "--lifespan on" in said[0]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"QUEUEGATE_TIMEOUT": "soon"}, "QUEUEGATE_TIMEOUT"),
        ({"QUEUEGATE_TIMEOUT": "-1"}, "timeout"),
        ({"QUEUEGATE_COOKIE_SECURE": "perhaps"}, "QUEUEGATE_COOKIE_SECURE"),
        ({"QUEUEGATE_WAITING_STATUS": "418"}, "waiting_status"),
        ({"QUEUEGATE_ROOMS": "[{"}, "QUEUEGATE_ROOMS is not valid JSON"),
        ({"QUEUEGATE_ROOMS": '{"name": "x"}'}, "JSON list"),
        ({"QUEUEGATE_ROOMS": '[{"name": "x", "paths": ["/x"], "rate": 1, "speed": 2}]'}, "speed"),
        ({"QUEUEGATE_ROOMS": '[{"name": "x", "paths": ["/x"], "rate": -2}]'}, "rate"),
        ({"QUEUEGATE_PREFIX": "a b"}, "prefix"),
        ({"QUEUEGATE_ENDPOINT": "queue"}, "endpoint"),
    ],
)
def test_bad_environment_names_the_variable(env: dict[str, str], named: str) -> None:
    environ = {"QUEUEGATE_SECRET_KEY": SECRET, "QUEUEGATE_REDIS_URL": "redis://x", **env}
    with pytest.raises(ConfigError, match=named):
        Settings.load(environ, rooms=None if "QUEUEGATE_ROOMS" in env else [ROOM])


def test_everything_from_the_environment() -> None:
    rooms = [{"name": "sale", "paths": ["/checkout*"], "rate": 5, "per": 2, "fail": "open"}]
    environ = {
        "QUEUEGATE_SECRET_KEY": f"{SECRET}new, {SECRET}",
        "QUEUEGATE_REDIS_URL": "redis://redis.internal:6380/2",
        "QUEUEGATE_ROOMS": json.dumps(rooms),
        "QUEUEGATE_COOKIE_SECURE": "false",
        "QUEUEGATE_TIMEOUT": "0.5",
        "QUEUEGATE_WAITING_STATUS": "429",
    }
    gate = QueueGate(ok_app, environ=environ)
    assert gate.settings.secret_keys == (f"{SECRET}new", SECRET)
    assert gate.settings.redis_url == "redis://redis.internal:6380/2"
    assert gate.rooms["sale"].room == Room("sale", paths=["/checkout*"], rate=5, per=2, fail="open")
    assert (gate.settings.cookie_secure, gate.settings.timeout, gate.settings.waiting_status) == (
        False,
        0.5,
        429,
    )


def test_open_methods_from_the_environment_and_the_deprecated_methods_warn() -> None:
    def gate_for(room: dict[str, object]) -> QueueGate:
        environ = {"QUEUEGATE_SECRET_KEY": SECRET, "QUEUEGATE_ROOMS": json.dumps([room])}
        return QueueGate(ok_app, redis="redis://x", environ=environ)

    gate = gate_for({"name": "sale", "paths": ["/checkout*"], "rate": 1, "open_methods": ["options"]})
    assert gate.rooms["sale"].room.open_methods == ("OPTIONS",)
    assert gate.match("/checkout", "PUT") is not None
    assert gate.match("/checkout", "OPTIONS") is None
    with pytest.warns(DeprecationWarning, match="open_methods"):
        old = gate_for({"name": "sale", "paths": ["/checkout*"], "rate": 1, "methods": ["POST"]})
    assert old.match("/checkout", "PUT") is None


@pytest.mark.parametrize(
    ("raw", "value"), [(None, None), ("auto", None), ("AUTO", None), ("true", True), ("off", False)]
)
def test_cookie_secure_follows_the_request_unless_set(raw: str | None, value: bool | None) -> None:
    environ = {} if raw is None else {"QUEUEGATE_COOKIE_SECURE": raw}
    assert Settings.load(environ, secret_key=SECRET, rooms=[ROOM]).cookie_secure is value
    with pytest.raises(ConfigError, match="cookie_secure"):
        Settings.load({}, secret_key=SECRET, rooms=[ROOM], cookie_secure="yes")


def test_code_wins_over_the_environment() -> None:
    environ = {"QUEUEGATE_SECRET_KEY": SECRET, "QUEUEGATE_TIMEOUT": "2"}
    gate = QueueGate(ok_app, rooms=[ROOM], redis="redis://x", timeout=0.1, environ=environ)
    assert gate.settings.timeout == 0.1


def test_duplicate_room_names() -> None:
    with pytest.raises(ConfigError, match="unique"):
        Settings.load({}, secret_key=SECRET, rooms=[ROOM, ROOM])


@pytest.mark.parametrize(
    ("room", "said"),
    [
        ({"name": "x", "path": ["/x"]}, "path (did you mean 'paths'?)"),
        ({"name": "x", "paths": ["/x"], "rate": 1, "sesion": 60}, "sesion (did you mean 'session'?)"),
        ({"name": "x", "paths": ["/x"], "speed": 2}, "unknown room setting(s) speed in"),
        ({"name": "x", "paths": ["/x"], "floor": 2}, 'given as "target"'),
        # A controller's name is not a room's: its near miss says where it goes.
        ({"name": "x", "paths": ["/x"], "rate": 1, "flor": 2}, "flor (did you mean target's 'floor'?)"),
        ({"name": "x", "paths": ["/x"], "rate": 1, "setle": 2}, "setle (did you mean target's 'settle'?)"),
        ({"name": "x", "paths": ["/x"], "rate": 1, "p95": 2}, "p95 (did you mean target's 'p95_ms'?)"),
    ],
)
def test_an_unknown_room_setting_names_the_one_it_is_likely_a_typo_of(
    room: dict[str, Any], said: str
) -> None:
    """``"path"`` for ``"paths"`` in QUEUEGATE_ROOMS was only "unknown"."""
    environ = {
        "QUEUEGATE_SECRET_KEY": SECRET,
        "QUEUEGATE_REDIS_URL": "redis://x",
        "QUEUEGATE_ROOMS": json.dumps([room]),
    }
    with pytest.raises(ConfigError) as raised:
        Settings.load(environ)
    assert said in str(raised.value)


def test_an_unknown_gate_setting_names_the_one_it_is_likely_a_typo_of() -> None:
    with pytest.raises(ConfigError, match=r"trusted_proxy \(did you mean 'trusted_proxies'\?\)"):
        Settings.load(
            {}, secret_key=SECRET, redis_url="redis://x", rooms=[ROOM], trusted_proxy=["10.0.0.0/8"]
        )


def test_an_unknown_environment_variable_is_a_warning_naming_the_one_it_is_likely_a_typo_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``QUEUEGATE_TIMOUT=0.1`` was ignored without a word, where a typo
    in ``QUEUEGATE_ROOMS`` is an error. A warning, not an error: the name
    may be a setting of another version of queuegate."""
    caplog.set_level(logging.WARNING, logger="queuegate")
    environ = {
        "QUEUEGATE_SECRET_KEY": SECRET,
        "QUEUEGATE_TIMOUT": "0.1",
        "QUEUEGATE_SHINY": "yes",
        "QUEUEGATE_ADMIN_SECRET": "back-office-secret",  # the back office's, known
        "TIMOUT": "0.1",  # not ours
    }
    gate = QueueGate(ok_app, rooms=[ROOM], redis="redis://x", environ=environ)
    assert gate.settings.timeout == 0.25  # ignored, as before
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "queuegate"]
    assert said == [
        (
            logging.WARNING,
            "queuegate: unknown environment variable QUEUEGATE_SHINY, ignored "
            "(not a setting of this version of queuegate)",
        ),
        (
            logging.WARNING,
            "queuegate: unknown environment variable QUEUEGATE_TIMOUT (did you mean "
            "'QUEUEGATE_TIMEOUT'?), ignored (not a setting of this version of queuegate)",
        ),
    ]
    # As the settings' reference shows it.
    assert said[1][1] in (Path(__file__).parent.parent / "docs/reference/settings.md").read_text()
    caplog.clear()
    QueueGate(ok_app, rooms=[ROOM], secret_key=SECRET, redis="redis://x", environ={"QUEUEGATE_TIMEOUT": "1"})
    assert [r for r in caplog.records if r.name == "queuegate"] == []


# QUEUEGATE_* names this repository shows as typos.
TYPOS = {"QUEUEGATE_TIMOUT", "QUEUEGATE_SHINY"}


def test_every_queuegate_variable_the_repository_names_is_known_to_the_gate() -> None:
    """So the gates its demo, tests and benchmarks start, with those
    variables set, warn of none, and the docs name no variable the gate
    does not read. (The repository's tests and benchmarks name their own
    QGDEV_*, outside the gate's names.)"""
    root = Path(__file__).parent.parent
    files = [
        *(root / ".ci").iterdir(),
        root / "README.md",
        root / "SECURITY.md",
        *(
            path
            for top in ("queuegate", "demo_app", "benchmarks", "examples", "tests")
            for path in (root / top).rglob("*.py")
        ),
        *(root / "docs").rglob("*.md"),
    ]
    texts = [path.read_text() for path in files]
    named = {name for text in texts for name in re.findall(r"QUEUEGATE_[A-Z0-9_]*[A-Z0-9]", text)}
    assert "QUEUEGATE_TIMEOUT" in named  # the scan sees the code
    assert any("QGDEV_E2E" in text for text in texts)  # and the CI (its own names are QGDEV_*)
    assert named - KNOWN_VARIABLES - TYPOS == set()
