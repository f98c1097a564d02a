"""Redis as production runs it: behind Sentinel (a real master, replica and
three sentinels, the master killed) and over TLS with verified certificates
(made by the test)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from queuegate import ConfigError, QueueGate, Room
from queuegate.embedded import EmbeddedServer, free_port, server_binary
from queuegate.store import connect

from .conftest import SECRET, _until, client_for, ok_app

pytestmark = pytest.mark.anyio

RECOVERY_SECONDS = 30


def start_sentinels(stack: ExitStack, folder: Path) -> tuple[EmbeddedServer, EmbeddedServer, list[int]]:
    """A master, its replica, and three sentinels watching them (quorum 2,
    the master is down after 1 s of silence)."""
    binary = server_binary("path")
    master = stack.enter_context(EmbeddedServer(binary))
    replica = stack.enter_context(EmbeddedServer(binary, args=["--replicaof", "127.0.0.1", str(master.port)]))
    ports = []
    for i in range(3):
        home = folder / f"sentinel{i}"
        home.mkdir()
        config = home / "sentinel.conf"
        config.write_text(
            f"sentinel monitor mymaster 127.0.0.1 {master.port} 2\n"
            "sentinel down-after-milliseconds mymaster 1000\n"
            "sentinel failover-timeout mymaster 5000\n"
            "sentinel parallel-syncs mymaster 1\n"
        )
        sentinel = EmbeddedServer(binary, config=str(config), data_dir=str(home), args=["--sentinel"])
        ports.append(stack.enter_context(sentinel).port)
    for port in ports:
        with redis.Redis(port=port, decode_responses=True) as sentinel_client:

            def knows_everyone(client: redis.Redis = sentinel_client) -> bool:
                replicas = cast(list[Any], client.sentinel_slaves("mymaster"))
                others = cast(list[Any], client.sentinel_sentinels("mymaster"))
                return len(replicas) == 1 and len(others) == 2

            _until(knows_everyone, 30)
    with redis.Redis(port=replica.port, decode_responses=True) as check:
        _until(lambda: check.info("replication").get("master_link_status") == "up")
    return master, replica, ports


async def test_the_gate_follows_a_sentinel_failover_with_the_line_intact(tmp_path: Path) -> None:
    with ExitStack() as stack:
        master, replica, ports = start_sentinels(stack, tmp_path)
        sentinels = ",".join(f"127.0.0.1:{port}" for port in ports)
        gate = QueueGate(
            ok_app,
            rooms=[Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)],
            secret_key=SECRET,
            redis=f"redis+sentinel://{sentinels}/mymaster",
            timeout=0.25,
            environ={},
        )
        try:
            async with client_for(gate) as admitted, client_for(gate) as waiting, client_for(gate) as late:
                assert (await admitted.get("/checkout")).status_code == 200
                assert (await waiting.get("/checkout")).status_code == 503
                with redis.Redis(port=master.port) as old_master:
                    assert old_master.wait(1, 5000) == 1  # the replica has the line
                master.kill()
                started = time.monotonic()
                statuses: set[int] = set()
                while True:
                    passed = gate.counters["outage_passed"]
                    copied = gate.store.admissions.hits
                    # Admitted before the failover: passes all through it.
                    assert (await admitted.get("/checkout")).status_code == 200
                    # Neither through the outage rule nor from the process's
                    # copy of the admission (trusted for up to 1 s after the
                    # kill): Redis, the new master, answered.
                    if gate.counters["outage_passed"] == passed and gate.store.admissions.hits == copied:
                        break
                    statuses.add((await late.get("/checkout")).status_code)
                    assert time.monotonic() - started < RECOVERY_SECONDS, (
                        "the gate did not follow the failover"
                    )
                    await asyncio.sleep(0.1)
                recovered = time.monotonic() - started
                print(f"\nthe gate followed the new master {recovered:.1f} s after the old one was killed")
                assert statuses <= {503}  # meanwhile: the fail mode, never an error
                # The promoted replica had the line: the same visitor waits first.
                status = await waiting.get("/_queuegate/status/sale")
                assert (status.json()["state"], status.json()["position"]) == ("waiting", 1)
                stats = await gate.rooms["sale"].stats()
                assert stats["active"] == 1
                with redis.Redis(port=replica.port, decode_responses=True) as new_master:
                    assert new_master.info("replication")["role"] == "master"
        finally:
            await gate.store.aclose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://127.0.0.1:26379", "names the sentinels and the master"),
        ("redis+sentinel://127.0.0.1:x/m", "not a valid"),
        ("redis+sentinel://127.0.0.1:26379/m?colour=blue", "unknown sentinel URL argument"),
    ],
)
def test_a_broken_sentinel_url_is_a_clear_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        connect(url, 0.25)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    """A TLS server whose certificate a test CA signed; and another CA."""
    trustme = pytest.importorskip("trustme")
    ca, stranger = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key", "stranger")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    stranger.cert_pem.write_to_path(str(files["stranger"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    port = free_port()
    args = ["--tls-port", str(port), "--tls-auth-clients", "no"]
    args += ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"])]
    args += ["--tls-ca-cert-file", str(files["ca"])]
    try:
        server = EmbeddedServer(server_binary("path"), args=args).start()
    except Exception as exc:  # a server built without TLS
        pytest.skip(f"this Redis has no TLS: {exc}")
    try:
        yield port, files["ca"], files["stranger"]
    finally:
        server.close()


async def test_rediss_verifies_the_servers_certificate(tls_server: tuple[int, Path, Path]) -> None:
    port, ca, stranger = tls_server
    room = Room("sale", paths=["/checkout*"], capacity=1, client_limit=0)

    def gate_on(query: str) -> QueueGate:
        url = f"rediss://127.0.0.1:{port}/0{query}"
        return QueueGate(ok_app, rooms=[room], secret_key=SECRET, environ={}, redis=url)

    trusted, other_ca, system_store = (
        gate_on(f"?ssl_ca_certs={ca}"),
        gate_on(f"?ssl_ca_certs={stranger}"),
        gate_on(""),
    )
    try:
        async with client_for(trusted) as a, client_for(trusted) as b:
            assert (await a.get("/checkout")).status_code == 200
            assert (await b.get("/checkout")).status_code == 503  # the line, over TLS
        assert (await trusted.rooms["sale"].stats())["waiting"] == 1
        for untrusting in (other_ca, system_store):
            async with client_for(untrusting) as c:
                assert (await c.get("/checkout")).status_code == 503  # fails closed: not verified
            assert untrusting.counters["failed_closed"] == 1
    finally:
        for gate in (trusted, other_ca, system_store):
            await gate.store.aclose()
