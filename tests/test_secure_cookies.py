"""The cookies' Secure flag follows the scheme the client used, over a real
uvicorn: a client over plain http keeps its place and its admission."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from queuegate import QueueGate, Room

from .conftest import SECRET, lifespan_app, served

SALE = Room("sale", paths=["/checkout*"], rate=1, per=60.0)
JSON = {"accept": "application/json"}
HTTPS = {"x-forwarded-proto": "https"}


def gate_for(redis_url: str, **options: Any) -> QueueGate:
    return QueueGate(lifespan_app, rooms=[SALE], secret_key=SECRET, redis=redis_url, environ={}, **options)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "queuegate" and "plain http" in r.getMessage()
    ]


def flags(response: httpx.Response) -> set[str]:
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("qg_sale=")
    return {part.strip().lower() for part in cookie.split(";")[1:]}


def keeps_place_and_admission(base: str, client_options: dict[str, Any]) -> set[str]:
    """Three clients as httpx sends cookies: the first admitted stays
    admitted, the waiting ones keep their places and their status polls
    know them. Returns the flags of the first cookie."""
    with (
        httpx.Client(base_url=base, **client_options) as first,
        httpx.Client(base_url=base, **client_options) as second,
        httpx.Client(base_url=base, **client_options) as third,
    ):
        admitted = first.get("/checkout")
        assert admitted.status_code == 200
        assert second.get("/checkout", headers=JSON).json()["position"] == 1
        assert third.get("/checkout", headers=JSON).json()["position"] == 2
        for _ in range(2):
            assert first.get("/checkout").status_code == 200
            assert first.post("/checkout").status_code == 200
            assert second.get("/checkout", headers=JSON).json()["position"] == 1
            assert third.get("/checkout", headers=JSON).json()["position"] == 2
            assert second.get("/_queuegate/status/sale").json()["state"] == "waiting"
    return flags(admitted)


def test_plain_http_sets_no_secure_keeps_places_and_says_so_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queuegate")
    with served(gate_for(redis_url)) as base:
        assert "secure" not in keeps_place_and_admission(base, {})
    (warning,) = warnings_of(caplog)
    assert "cookie_secure=True" in warning


def test_https_sets_secure_and_keeps_places(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    tls = {"ssl_certfile": str(tmp_path / "cert.pem"), "ssl_keyfile": str(tmp_path / "key.pem")}
    caplog.set_level(logging.WARNING, logger="queuegate")
    with served(gate_for(redis_url), verify=trusted, **tls) as base:
        assert base.startswith("https://")
        cookie = keeps_place_and_admission(base, {"verify": trusted})
        assert {"secure", "httponly", "samesite=lax", "path=/"} <= cookie
    assert warnings_of(caplog) == []
    # An explicit cookie_secure=False wins over https.
    plain = gate_for(redis_url, cookie_secure=False)
    with served(plain, verify=trusted, **tls) as base, httpx.Client(base_url=base, verify=trusted) as client:
        assert "secure" not in flags(client.get("/checkout"))
    assert warnings_of(caplog) == []


@pytest.mark.parametrize(
    ("server", "gate", "headers", "secure"),
    [
        # uvicorn trusts X-Forwarded-Proto from 127.0.0.1 by default: it sets the scheme.
        ({}, {}, HTTPS, True),
        # The server does not, the gate does (trusted_proxies).
        ({"proxy_headers": False}, {"trusted_proxies": ["127.0.0.0/8"]}, HTTPS, True),
        # Nobody trusts the sender: its header changes nothing.
        ({"proxy_headers": False}, {"trusted_proxies": ["10.0.0.0/8"]}, HTTPS, False),
        ({"proxy_headers": False}, {}, HTTPS, False),
        # A trusted proxy that says http.
        ({"proxy_headers": False}, {"trusted_proxies": ["127.0.0.1"]}, {"x-forwarded-proto": "http"}, False),
        # An explicit setting wins over plain http.
        ({}, {"cookie_secure": True}, {}, True),
    ],
)
def test_a_proxy_s_forwarded_proto_counts_when_trusted_and_an_explicit_setting_wins(
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    server: dict[str, Any],
    gate: dict[str, Any],
    headers: dict[str, str],
    secure: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="queuegate")
    with served(gate_for(redis_url, **gate), **server) as base, httpx.Client(base_url=base) as client:
        for _ in range(2):
            client.cookies.clear()
            assert ("secure" in flags(client.get("/checkout", headers=headers))) is secure
    assert len(warnings_of(caplog)) == (0 if secure else 1)
