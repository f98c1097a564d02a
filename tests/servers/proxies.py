"""TCP proxies that misbehave the way networks do, for the tests of what
the gate and its pages do then: one in front of Redis that delays or
swallows its replies, one in front of the app that holds a waiting page's
stream open and stops passing what the server sends on it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time


class DelayingProxy:
    """A TCP proxy to Redis that can delay or swallow what Redis sends back."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.0
        self.flowing = asyncio.Event()  # cleared: a black hole
        self.flowing.set()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        redis_r, redis_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slow: bool) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await reader.read(65536):
                    if slow:
                        await self.flowing.wait()
                        if self.delay:
                            await asyncio.sleep(self.delay)
                    writer.write(data)
                    await writer.drain()
            writer.close()

        for task in (pipe(client_r, redis_w, False), pipe(redis_r, client_w, True)):
            self.tasks.add(asyncio.create_task(task))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class SilencingProxy:
    """A TCP proxy in front of a server that passes every connection
    through, but stops passing the server's bytes of a waiting page's
    stream ``after`` seconds into it, while holding the connection open: a
    middlebox gone quiet, or a push lost on the way, as the page sees it."""

    def __init__(self, upstream: str, after: float) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.after = after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.silenced = b""
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        # When the connection's request became a stream's (a connection
        # kept alive may carry the page's request first).
        opened: list[float] = []
        threading.Thread(target=self._requests, args=(client, server, opened), daemon=True).start()
        try:
            while data := server.recv(65536):
                if opened and time.monotonic() - opened[0] > self.after:
                    self.silenced += data
                    continue  # read, never passed on: the connection stays open
                client.sendall(data)
        except OSError:
            pass

    def _requests(self, client: socket.socket, server: socket.socket, opened: list[float]) -> None:
        try:
            while data := client.recv(65536):
                if data.startswith(b"GET /_queuegate/stream/"):
                    opened.append(time.monotonic())
                server.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for held in self.sockets:
            with contextlib.suppress(OSError):
                held.shutdown(socket.SHUT_RDWR)
            held.close()
