"""The private server the tests, the demo and the benchmarks start."""

from __future__ import annotations

import socket

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
            with redis.Redis(port=server.port) as client:
                assert client.cluster("info")["cluster_state"] in ("ok", "fail")


def test_a_port_given_and_taken_is_a_clear_error() -> None:
    with held_port() as taken:
        server = EmbeddedServer(server_binary("path"), port=taken.getsockname()[1])
        with pytest.raises(EmbeddedServerError, match="did not start on port"):
            server.start()
        server.close()
