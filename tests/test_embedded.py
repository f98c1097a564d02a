"""The private server the tests, the demo and the benchmarks start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from queuegate.embedded import EmbeddedServer, EmbeddedServerError, server_binary

from .conftest import EXTERNAL

pytestmark = pytest.mark.skipif(bool(EXTERNAL), reason="starts servers of its own")


def held_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_chosen_port_taken_before_the_server_binds_it_is_chosen_again() -> None:
    # What a CI run met: a cluster node's bus port, free when chosen, was an
    # outgoing connection's by the time the node bound it.
    with held_port() as taken_bus, held_port() as taken_port:
        server = EmbeddedServer(
            server_binary("path"),
            args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
            port_options=["--cluster-port"],
        )
        server.port = taken_port.getsockname()[1]
        server.ports["--cluster-port"] = taken_bus.getsockname()[1]
        with server:
            assert server.port != taken_port.getsockname()[1]
            assert server.ports["--cluster-port"] != taken_bus.getsockname()[1]
            with redis.Redis(port=server.port, decode_responses=True) as client:
                bus = client.config_get("cluster-port")["cluster-port"]
                assert int(bus) == server.ports["--cluster-port"]


def test_a_server_started_again_keeps_its_port() -> None:
    # Clients hold its URL across a restart (the fault tests stop and start
    # a server under a store).
    with EmbeddedServer(server_binary("path")) as server:
        port = server.port
        server.stop()
        server.start()
        assert server.port == port
        with redis.Redis(port=port) as client:
            assert client.ping()
        server.stop()
        # Taken meanwhile: an error, not a server at another address.
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", port))
            taken.listen()
            with pytest.raises(EmbeddedServerError, match="did not start on port"):
                server.start()
        assert server.port == port


def test_a_port_given_and_taken_is_a_clear_error() -> None:
    with held_port() as taken:
        for options in ((), ("--cluster-port",)):
            server = EmbeddedServer(server_binary("path"), port=taken.getsockname()[1], port_options=options)
            if options:
                server.args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            with pytest.raises(EmbeddedServerError, match="did not start on port"):
                server.start()
            server.close()


def test_a_port_given_where_another_server_answers_is_a_clear_error() -> None:
    """A Redis already on the port answers the readiness ping while the new
    server fails to bind it: `python -m queuegate.embedded --port 6379`
    printed the other server's URL as its own."""
    with EmbeddedServer() as other:
        with pytest.raises(EmbeddedServerError, match=f"did not start on port {other.port}"):
            EmbeddedServer(port=other.port).start(timeout=5)
        with redis.Redis.from_url(other.url) as client:
            assert client.ping()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_python_m_queuegate_embedded_serves_until_stopped_and_leaves_nothing(
    stop: signal.Signals, tmp_path: Path
) -> None:
    """A first run of one's own app without Redis: the command prints the
    URL to export, the server answers there, and Ctrl-C (or a SIGTERM)
    stops it and removes its folder."""
    # Its folder in a temporary directory of its own (other sessions on the
    # machine make theirs in the shared one meanwhile).
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "queuegate.embedded"]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdout=pipe, stderr=pipe, text=True, env=env) as process:
        try:
            assert process.stdout is not None
            assert process.stderr is not None
            process.stdout.readline()  # the version and port
            url = process.stdout.readline().strip().removeprefix("export QUEUEGATE_REDIS_URL=")
            with redis.Redis.from_url(url) as client:
                assert client.ping()
            process.send_signal(stop)
            assert process.wait(15) == 0, process.stderr.read()
        finally:
            process.kill()
    with pytest.raises(redis.ConnectionError), redis.Redis.from_url(url) as client:
        client.ping()
    assert not list(tmp_path.glob("queuegate-server-*"))
