"""Automatic pipelining: every script call of a process on one connection.

Under load most of the cost of a Redis call is on the client: packing, a
write and a read per command, a pool to hand connections around, a timer per
call. Here the commands that arrive while the previous batch is being written
go out together in one write (at most ``MAX_BATCH`` of them wait), one reader
resolves the replies in order, and one timer enforces every caller's deadline.

A caller that gives up (deadline, cancellation) only abandons its future: its
reply is still read and dropped in turn, so no later caller can ever get an
earlier caller's reply. A broken or silent connection fails every command in
flight on it, and the next batch opens a new one.

Connections, their timeouts and the reply parser are redis-py's
(``redis.asyncio.Connection``); commands arrive already encoded (``pack``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import (
    ConnectionError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TimeoutError,
)

try:  # what redis-py's hiredis reader answers when its buffer holds no whole reply
    from redis._parsers.hiredis import NOT_ENOUGH_DATA
except ImportError:  # pragma: no cover - another redis-py: replies are read one await each
    NOT_ENOUGH_DATA = None

__all__ = ["AutoPipeline", "ClusterPipelines", "encode", "pack"]

# Most commands one batch waits for before it is written: Redis starts on the
# first while the app makes the rest (measured: polling 19,000 -> 24,000 req/s
# at 32 connections; admitted visitors unchanged; 8 cost them 4 %).
MAX_BATCH = 16


def encode(value: str | bytes | int) -> bytes:
    """One argument as a RESP bulk string."""
    if isinstance(value, str):
        value = value.encode()
    elif isinstance(value, int):
        value = b"%d" % value
    return b"$%d\r\n%s\r\n" % (len(value), value)


def pack(*args: str | bytes | int) -> bytes:
    """A command as RESP: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(encode(arg) for arg in args)


class _Parser(Protocol):
    """What this module uses of redis-py's reply parsers."""

    async def read_response(self) -> Any: ...


class _Link:
    """One connection and the futures of the commands in flight on it."""

    def __init__(self, connection: AbstractConnection) -> None:
        self.connection = connection
        self.in_flight: deque[asyncio.Future[Any]] = deque()
        self.reader: asyncio.Task[None] | None = None
        self.broken = False
        self.connected = False
        self.progress = 0.0  # loop time of the last reply, or of the first command in flight


class AutoPipeline:
    """Sends packed commands on one connection made by ``make_connection()``;
    each call fails with ``TimeoutError`` if its reply is not there within
    ``timeout`` seconds, and a connection that has commands in flight but
    sends nothing for ``silence`` seconds is given up."""

    def __init__(
        self, make_connection: Callable[[], AbstractConnection], timeout: float, silence: float
    ) -> None:
        self._make_connection = make_connection
        self._timeout = timeout
        self._silence = silence
        self._link: _Link | None = None
        self._queued: list[tuple[bytes, asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        # Every call has the same timeout, so deadlines come in order: one
        # timer, armed for the oldest, serves them all.
        self._deadlines: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        # Disconnects of given-up links still under way (aclose waits for them).
        self._closing: set[asyncio.Future[None]] = set()
        # The loop of the first call, kept: asyncio.get_running_loop() costs a
        # getpid() system call on every call (CPython 3.11), a pipeline is
        # bound to one loop anyway (its connection is).
        self._loop: asyncio.AbstractEventLoop | None = None

    def send(self, command: bytes, key: str = "") -> asyncio.Future[Any]:
        """Send one packed command; the future is its reply (an error reply
        is its exception). A plain function returning the future, not a
        coroutine: one await level less on every call. (``key`` is for the
        cluster's router; one server needs none.)"""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._closed:
            future.set_exception(ConnectionError("the pipeline is closed"))
            return future
        self._queued.append((command, future))
        deadline = loop.time() + self._timeout
        self._deadlines.append((deadline, future))
        # The timer may be armed for a later moment (the silence check of a
        # connection whose calls have all timed out): every call gets its
        # own deadline, however many timed out before it.
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        if len(self._queued) >= MAX_BATCH and self._write_now():
            return future
        self._wake.set()
        if self._writer is None:
            self._writer = loop.create_task(self._write_loop())
        return future

    def _expire(self) -> None:
        loop = self._loop
        assert loop is not None  # armed by a call
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1].done()):
            _, future = deadlines.popleft()
            if not future.done():
                future.set_exception(TimeoutError(f"no reply from Redis within {self._timeout} s"))
        # Reads wait without a timer of their own (one per reply costs more
        # than the rest of the read); a silent connection is caught here.
        link = self._link
        if link is not None and link.in_flight and now - link.progress > self._silence:
            self._break(link, TimeoutError(f"Redis sent nothing for {self._silence} s"))
        if self._deadlines:
            self._timer = loop.call_at(self._deadlines[0][0], self._expire)
        elif link is not None and link.in_flight:
            self._timer = loop.call_at(now + self._silence, self._expire)
        else:
            self._timer = None

    def _write_now(self) -> bool:
        """Write what is queued at once, if the connection is up (else the
        write loop will). The write loop only runs after every request task
        of the event loop's current round, and Redis would wait for all of
        their commands before starting on the first: a long batch of slow
        scripts (polls, joins) left the app idle for a quarter of the time."""
        link = self._link
        if link is None or link.broken or not link.connected:
            return False
        if not link.in_flight and _closed_by_server(link):
            return False  # the write loop opens a new connection (_write)
        writer = getattr(link.connection, "_writer", None)  # redis-py's StreamWriter
        if writer is None:
            return False
        batch, self._queued = self._queued, []
        batch = [(command, future) for command, future in batch if not future.done()]
        if batch:
            self._track(link, [future for _, future in batch])
            try:
                writer.writelines([command for command, _ in batch])
            except (OSError, RuntimeError) as exc:  # the transport is closing
                self._break(link, exc)
        return True

    def _track(self, link: _Link, futures: list[asyncio.Future[Any]]) -> None:
        """Commands about to be written on ``link``: their replies come in
        this order, read by the link's one reader."""
        loop = self._loop
        assert loop is not None  # set by the first call
        if not link.in_flight:
            link.progress = loop.time()
        link.in_flight.extend(futures)
        if link.reader is None or link.reader.done():
            link.reader = loop.create_task(self._read_loop(link))

    async def _write_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queued = self._queued, []
            await self._write(batch)
            del batch

    async def _write(self, batch: list[tuple[bytes, asyncio.Future[Any]]]) -> None:
        # A call of its own per batch: nothing of a batch stays referenced by
        # the loop's frame while it waits for the next one.
        batch = [(command, future) for command, future in batch if not future.done()]
        if not batch:
            return
        futures = [future for _, future in batch]
        link = self._link
        if link is not None and not link.broken and not link.in_flight and _closed_by_server(link):
            # Redis closed it while it was idle (a restart): heard then, not
            # by this batch's calls failing (one 503 per process after each
            # restart, with Redis already answering again).
            self._break(link, ConnectionError("Redis closed the connection"))
            link = None
        try:
            if link is None or link.broken:
                link = self._link = _Link(self._make_connection())
                await link.connection.connect()  # type: ignore[no-untyped-call]
                link.connected = True
            # No await between these two: calls in flight stay in write order.
            self._track(link, futures)
            await link.connection.send_packed_command([c for c, _ in batch], check_health=False)
        except (RedisError, OSError) as exc:
            if link is not None:
                self._break(link, exc)
            _fail(futures, exc)

    async def _read_loop(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        # redis-py's reply parser itself: the connection's read_response()
        # adds a timeout, error wrapping and health checks per reply, which
        # this loop does once for all. With hiredis (a dependency), the
        # replies already in its buffer are taken without an await each.
        parser = link.connection._parser
        read = cast(_Parser, parser).read_response
        buffered: Callable[[], Any] | None = getattr(getattr(parser, "_reader", None), "gets", None)
        if NOT_ENOUGH_DATA is None:
            buffered = None
        in_flight = link.in_flight
        while in_flight and not link.broken:
            replies: list[Any] = []
            try:
                replies.append(await read())
                if buffered is not None:
                    while len(replies) < len(in_flight) and (reply := buffered()) is not NOT_ENOUGH_DATA:
                        replies.append(reply)
            except ResponseError as exc:
                replies.append(exc)
            except (RedisError, OSError) as exc:
                self._break(link, exc)
                return
            except asyncio.CancelledError:
                return  # the link was given up while this read waited
            if link.broken:
                return
            link.progress = loop.time()
            if self._answer(in_flight, replies):
                # This server is a replica now (a failover demoted it): the
                # next connection asks where the master is (Sentinel).
                self._break(link, ReadOnlyError("Redis is a read-only replica now"))
                return

    def _answer(self, in_flight: deque[asyncio.Future[Any]], replies: list[Any]) -> bool:
        """Resolve the oldest calls in flight with ``replies``, in order. (Not
        in the read loop itself, whose frame would keep the last one.)
        True when a reply says the server is a read-only replica."""
        read_only = False
        for reply in replies:
            future = in_flight.popleft()
            if isinstance(reply, ResponseError):
                read_only = read_only or isinstance(reply, ReadOnlyError) or "READONLY" in str(reply)
                if not future.done():
                    future.set_exception(reply)
            elif not future.done():  # else its caller gave up; the reply is dropped, in order
                future.set_result(reply)
        # Calls answered are forgotten at once: a second's worth of them kept
        # until their deadline would outlive the young GC generations and
        # bring on full collections (the latency tail).
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        return read_only

    def _break(self, link: _Link, exc: BaseException) -> None:
        """The link is broken or silent: its commands in flight fail, and the
        next batch opens a new connection."""
        link.broken = True
        if self._link is link:
            self._link = None
        _fail(list(link.in_flight), exc)
        link.in_flight.clear()
        if link.reader is not None and link.reader is not asyncio.current_task():
            link.reader.cancel()
        closing = asyncio.ensure_future(link.connection.disconnect(nowait=True))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.cancel()
        if self._timer is not None:
            self._timer.cancel()
        closed = ConnectionError("the pipeline is closed")
        _fail([future for _, future in self._queued], closed)
        self._queued = []
        if self._link is not None:
            link = self._link
            self._break(link, closed)
            if link.reader is not None:
                link.reader.cancel()
            await link.connection.disconnect(nowait=True)
        # A link given up before (silent, broken, a replica) may still be
        # closing in the background: its socket is closed before this returns.
        for closing in list(self._closing):
            with contextlib.suppress(RedisError, OSError, asyncio.CancelledError):
                await closing


def _closed_by_server(link: _Link) -> bool:
    """Whether the server ended the link's stream (its reader saw the end:
    what the event loop heard while nothing was in flight)."""
    reader = getattr(link.connection, "_reader", None)
    return reader is not None and reader.at_eof()


def _fail(futures: list[asyncio.Future[Any]], exc: BaseException) -> None:
    error = exc if isinstance(exc, RedisError) else ConnectionError(str(exc))
    for future in futures:
        if not future.done():
            future.set_exception(error)


class ClusterPipelines:
    """One ``AutoPipeline`` per primary of a Redis Cluster. Each command goes
    to the node that owns its key's slot (all of a room's keys share one), as
    redis-py's cluster client maps them. A MOVED or ASK reply (slots moved,
    a replica promoted) or a broken node makes the client refresh its map,
    and the command is sent once more to the node that owns the slot now.

    The map is learnt from the nodes (redis-py's ``NodesManager``): one
    refresh at a time, shared by the calls that need it, each waiting at most
    ``timeout`` for it. A cluster no node of which answers is a
    ``ConnectionError`` (redis-py raises ``RedisClusterException``, which is
    no ``RedisError``), so callers see an outage like any other."""

    def __init__(self, cluster: RedisCluster, timeout: float, silence: float) -> None:
        self._cluster = cluster
        self._timeout = timeout
        self._silence = silence
        self._pipes: dict[str, AutoPipeline] = {}
        self._mapping: asyncio.Future[None] | None = None

    def _pipe(self, key: str) -> AutoPipeline:
        node = self._cluster.get_node_from_key(key)
        if node is None:
            raise ConnectionError(f"no cluster node serves the key {key!r}")
        pipe = self._pipes.get(node.name)
        if pipe is None:
            options = {**node.connection_kwargs, "socket_timeout": None}
            pipe = AutoPipeline(lambda: node.connection_class(**options), self._timeout, self._silence)
            self._pipes[node.name] = pipe
        return pipe

    def send(self, command: bytes, key: str = "") -> Awaitable[Any]:
        return self._send(command, key)

    async def _send(self, command: bytes, key: str) -> Any:
        if not self._cluster.nodes_manager.slots_cache:
            await self._learn_map()
        try:
            return await self._pipe(key).send(command)
        except ResponseError as exc:
            if not str(exc).startswith(("MOVED", "ASK")):
                raise
        except ConnectionError:
            pass  # the node is gone
        # Learn the new map, then one more try.
        await self._learn_map()
        return await self._pipe(key).send(command)

    async def _learn_map(self) -> None:
        mapping = self._mapping
        if mapping is None or mapping.done():
            mapping = self._mapping = asyncio.ensure_future(self._refresh())
            # Its failure is read here even when every caller gave up waiting.
            mapping.add_done_callback(lambda done: done.cancelled() or done.exception())
        # asyncio.wait cancels nothing: a caller that gives up leaves the
        # refresh to the others.
        await asyncio.wait((mapping,), timeout=self._timeout)
        if not mapping.done():
            raise TimeoutError(f"no cluster slot map from Redis within {self._timeout} s")
        mapping.result()

    async def _refresh(self) -> None:
        try:
            if self._cluster.nodes_manager.slots_cache:
                await self._cluster.nodes_manager.initialize()
            else:  # the first map: the client's whole start (its command parser too)
                await self._cluster.initialize()
        except RedisClusterException as exc:
            raise ConnectionError(str(exc)) from exc

    async def aclose(self) -> None:
        if self._mapping is not None and not self._mapping.done():
            self._mapping.cancel()
            with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                await self._mapping
        for pipe in self._pipes.values():
            await pipe.aclose()
