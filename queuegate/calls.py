"""Script calls on the wire: what every call to a room's Lua scripts shares.

A call is one EVALSHA on the automatically pipelined connection (see
``queuegate.pipeline``; with a cluster, one per primary, each call sent to
the node that owns its room's slot). This module builds it (the room's keys,
and the arguments every script takes first: the clock, the room's defaults
and, until stored, the lottery's seed offer), loads a script a server does
not know, turns failures into ``StoreError`` and keeps Redis's time in this
process (``RedisClock``). What the calls mean is ``queuegate.store``'s.

A script of ``queuegate.scripts.LIBRARIES`` (newcomers' joins sent
together, and enter) is an FCALL of a function library instead, where its
parts' functions are made once per load, not at every call (a fifth to a
quarter of such a call's own cost in Redis:
docs/profiles/join-redis-2026-11-26.txt). A
server that has no functions (before Redis 7), or refuses them, is sent
the same script by EVALSHA from then on. A server that refuses writes for
now (over its maxmemory with noeviction, too few replicas, a failed save)
refuses a function (these have no flags) before it runs, where a script
fails only at its first write: such a call is sent again as a script, so
an admitted visitor is still answered there.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import (
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from .connections import Client
from .pipeline import AutoPipeline, ClusterPipelines, encode, pack
from .scripts import LIBRARIES, SCRIPTS, SEEDING, library, script
from .settings import ConfigError, Room

__all__ = ["FAILURES", "RedisClock", "RoomRef", "ScriptCalls", "StoreError", "UnknownRoom"]

RoomRef = Room | str  # a Room from code, or a room's name (its defaults are read from Redis)


class StoreError(Exception):
    """Redis could not answer: down, slow, or refused the command."""


class UnknownRoom(StoreError):
    """A room named only by its name has never been used under the store's
    key prefix, so Redis has no settings for it there."""


# What a Redis call raises when Redis fails: a cluster's client raises
# RedisClusterException (no RedisError) when no node answers.
FAILURES = (RedisError, RedisClusterException, OSError)
_NO_SEED = object()  # a reply that says: call again, offering the room a seed


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's failure as seen (asyncio logs those nobody saw)."""
    if not future.cancelled():
        future.exception()


class _AsScript(Exception):
    """This call goes as a script (EVALSHA), not as a function."""


def _no_function(exc: ResponseError) -> bool:
    """Whether an FCALL failed for want of the function: not loaded on this
    server (yet), FCALL unknown (before Redis 7), or refused by its ACL."""
    missing = str(exc).startswith(("Function not found", "unknown command"))
    return missing or isinstance(exc, NoPermissionError)


def _no_functions(exc: ResponseError) -> bool:
    """Whether a FUNCTION LOAD failed for good: no functions on this server
    (before Redis 7), refused by its ACL, or a library it cannot compile."""
    text = str(exc)
    return text.startswith("unknown command") or "compil" in text or isinstance(exc, NoPermissionError)


def _unless_missing(exc: ResponseError) -> None:
    """Raise ``exc``, or _AsScript where the call may go as a script: the
    server refuses writes for now (a function, having no flags, is refused
    before it runs, where a script fails only at a write: as a script, the
    visitors inside are still let through). Return where the function is
    missing."""
    if _refused_writes(exc):
        raise _AsScript from exc
    if not _no_function(exc):
        raise exc


def _refused_writes(exc: ResponseError) -> bool:
    """Whether the server refuses writes for now: over its maxmemory
    (noeviction), too few replicas (min-replicas-to-write), a failed save
    (stop-writes-on-bgsave-error), or a replica."""
    refused = isinstance(exc, (OutOfMemoryError, ReadOnlyError))
    return refused or str(exc).startswith(("NOREPLICAS", "MISCONF"))


class RedisClock:
    """Redis's time in this process: Redis TIME minus this process's
    monotonic clock (ms), learnt from the Redis time every reply carries."""

    __slots__ = ("offset",)

    def __init__(self) -> None:
        self.offset: int | None = None

    def learn(self, redis_ms: int) -> None:
        """A reply's Redis time: each sample is at most the true offset (the
        reply took time to arrive), so the largest is the best; a sample far
        below it means Redis's clock moved (a failover to another host)."""
        sample = redis_ms - int(time.monotonic() * 1000)
        offset = self.offset
        if offset is None or sample > offset or sample < offset - 1000:
            self.offset = sample

    def now_ms(self) -> int:
        """Redis's time now, as last learnt from its replies (this host's
        wall clock before any reply: Redis TIME is its host's wall clock)."""
        offset = self.offset
        if offset is None:
            return int(time.time() * 1000)
        return int(time.monotonic() * 1000) + offset


class ScriptCalls:
    """Calls to the room scripts under ``prefix``, each given up ``timeout``
    seconds after it is made (in Redis time: clock.lua)."""

    def __init__(self, client: Client, prefix: str, timeout: float) -> None:
        self.client = client
        self.prefix = prefix
        self._timeout_ms = round(timeout * 1000)
        self._scripts = {name: script(name) for name in SCRIPTS}
        shas = {name: hashlib.sha1(text.encode()).hexdigest() for name, text in self._scripts.items()}
        self._seeded: set[str] = set()
        # FCALL for the scripts served as functions, until the server shows
        # it has none (then EVALSHA, as for the others).
        self._functions = {name: library(name) for name in LIBRARIES}
        self.fcall = True
        # Every call's deadline is sent in Redis time.
        self.clock = RedisClock()
        self._syncing: asyncio.Future[Any] | None = None
        self._loading: dict[str, asyncio.Future[Any]] = {}
        self.pipeline: AutoPipeline | ClusterPipelines
        if isinstance(client, aioredis.RedisCluster):
            self.pipeline = ClusterPipelines(client, timeout, max(1.0, 4 * timeout))
        else:
            pool = client.connection_pool
            # The pipeline keeps its own time (a deadline per call, and a
            # connection silent for 4 timeouts, 1 s at least, is given up), so
            # its connection needs no socket timeout of its own.
            options = {**pool.connection_kwargs, "socket_timeout": None}
            self.pipeline = AutoPipeline(
                lambda: pool.connection_class(**options), timeout, max(1.0, 4 * timeout)
            )
        # Encoded once: the parts of a call that repeat.
        self._encoded_shas = {name: encode("EVALSHA") + encode(sha) for name, sha in shas.items()}
        self._encoded_functions = {
            name: encode("FCALL") + encode(function) for name, (function, _) in self._functions.items()
        }
        self._encoded = lru_cache(maxsize=20_000)(encode)
        self.keys = lru_cache(maxsize=10_000)(self._make_keys)
        self._head = lru_cache(maxsize=10_000)(self._make_head)

    def base(self, room: str) -> str:
        """The start of each of the room's keys. One {room} hash tag for all
        of them (these, and the client and user keys of enter): each script
        touches a single cluster slot, and rooms spread over the cluster."""
        return f"{self.prefix}:{{{room}}}:"

    def _make_keys(self, room: str) -> tuple[str, ...]:
        # The room's keys: seq, waiting, seen, active, state.
        base = self.base(room)
        return tuple(base + name for name in ("seq", "waiting", "seen", "active", "state"))

    def _command(
        self, script: str, room: str, extra_keys: Sequence[str], args: Sequence[str], fcall: bool = False
    ) -> bytes:
        # Everything up to the room's own keys is the same call after call,
        # and so are most other keys and arguments (room defaults, flags):
        # their encodings are cached (not visitor ids, which would only churn
        # the cache).
        cached = self._encoded
        # (The join script's keys are its newcomers' clients: new each time.)
        keys = (
            [encode(key) for key in extra_keys] if script == "join" else [cached(key) for key in extra_keys]
        )
        return b"".join(
            [
                self._head(script, room, len(extra_keys), len(args), fcall),
                *keys,
                *[cached(arg) if len(arg) > 40 or len(arg) < 2 else encode(arg) for arg in args],
            ]
        )

    def _make_head(self, script: str, room: str, extra_keys: int, args: int, fcall: bool) -> bytes:
        keys = self.keys(room)
        return b"".join(
            [
                b"*%d\r\n" % (3 + len(keys) + extra_keys + args),
                self._encoded_functions[script] if fcall else self._encoded_shas[script],
                encode(len(keys) + extra_keys),
                *[encode(key) for key in keys],
            ]
        )

    async def _load(self, script: str) -> None:
        """Load a script after NOSCRIPT (a restarted or new server; on every
        node of a cluster). Requests that meet NOSCRIPT together share one
        load instead of sending the script once each."""
        loading = self._loading.get(script)
        if loading is None or loading.done():
            if isinstance(self.pipeline, ClusterPipelines):
                load = self.client.script_load(self._scripts[script])  # on every primary
            else:
                load = self.pipeline.send(pack("SCRIPT", "LOAD", self._scripts[script]))
            loading = self._loading[script] = asyncio.ensure_future(load)
        await asyncio.shield(loading)

    async def _load_library(self, script: str) -> None:
        """Load ``script``'s function library after "Function not found" (a
        new or restarted server; on every primary of a cluster), shared by
        the requests that meet it together. A server that has no functions,
        or refuses this one, is sent EVALSHA instead from then on."""
        key = f"library:{script}"
        loading = self._loading.get(key)
        if loading is None or loading.done():
            code = self._functions[script][1]
            if isinstance(self.pipeline, ClusterPipelines):
                load = self.client.function_load(code, replace=True)  # on every primary
            else:
                load = self.pipeline.send(pack("FUNCTION", "LOAD", "REPLACE", code))
            loading = self._loading[key] = asyncio.ensure_future(load)
        try:
            await asyncio.shield(loading)
        except ResponseError as exc:
            if _no_functions(exc):
                self.fcall = False
            # Else refused for now (over its maxmemory, busy, a replica):
            # this call goes as a script, the next tries the library again.
            raise _AsScript from exc

    async def _send_function(self, script: str, command: bytes, key: str) -> Any:
        """FCALL ``command``, loading its library where the server has not
        got it; _AsScript where this call must go as a script."""
        try:
            return await self.pipeline.send(command, key)
        except ResponseError as exc:
            _unless_missing(exc)
        await self._load_library(script)
        try:
            return await self.pipeline.send(command, key)
        except ResponseError as exc:
            _unless_missing(exc)
            self.fcall = False  # loaded, and still refused (its ACL)
            raise _AsScript from exc

    async def _send(self, script: str, name: str, extra_keys: tuple[str, ...], args: list[str]) -> Any:
        key = self.keys(name)[0]  # for a cluster's router
        if self.fcall and script in self._functions:
            command = self._command(script, name, extra_keys, args, fcall=True)
            with contextlib.suppress(_AsScript):
                return await self._send_function(script, command, key)
        command = self._command(script, name, extra_keys, args)
        try:
            return await self.pipeline.send(command, key)
        except NoScriptError:
            pass  # loaded below: no await inside a handler (tests/test_compiled.py)
        await self._load(script)
        return await self.pipeline.send(command, key)

    @staticmethod
    def _seed_offer() -> str:
        # Until a room is known to have its secret seed, offer a fresh one with
        # its SHA-256; the script keeps the first offer and ignores the rest.
        seed = secrets.token_hex(16)
        return f"{seed}:{hashlib.sha256(seed.encode()).hexdigest()}"

    async def _sync_clock(self) -> None:
        """Learn Redis's time once, before the first call that needs a deadline."""
        syncing = self._syncing
        if syncing is None or syncing.done():
            syncing = self._syncing = asyncio.ensure_future(self.pipeline.send(pack("TIME"), self.prefix))
        try:
            seconds, micros = await asyncio.shield(syncing)
        except FAILURES as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc
        self.clock.learn(int(seconds) * 1000 + int(micros) // 1000)

    async def call(
        self, script: str, room: RoomRef, now: int | None, *args: str, extra_keys: tuple[str, ...] = ()
    ) -> Any:
        """Run ``script`` for ``room`` at ``now`` (ms; ``None``: Redis's own
        time, with this call's deadline) with ``args`` after the ones every
        script takes, and ``extra_keys`` after the room's own."""
        # On the path of every gated request: one coroutine between the
        # caller and the reply (each await level costs on the way back too).
        name, defaults = (room, "") if isinstance(room, str) else (room.name, room.defaults)
        # The room's lottery seed is offered until a call that stores it
        # (one that runs advance.lua) has gone through.
        seed = "" if name in self._seeded or script not in SEEDING else self._seed_offer()
        if now is not None:
            clock = str(now)
        else:
            offset = self.clock.offset
            if offset is None:
                await self._sync_clock()
                offset = self.clock.offset
                assert offset is not None
            # The caller gives up `timeout` from now: a script that starts
            # later changes nothing (clock.lua).
            clock = f"d{int(time.monotonic() * 1000) + offset + self._timeout_ms}"
        try:
            reply = await self._send(script, name, extra_keys, [clock, defaults, seed, *args])
        except RedisError as exc:
            if str(exc).startswith("NO_SEED") and not seed:
                # A room that draws, made anew since this process saw its seed
                # stored (advance.lua): offered one, below (no await in a
                # handler: tests/test_compiled.py).
                reply = _NO_SEED
            elif str(exc).startswith("UNKNOWN_ROOM"):
                # Said with the prefix: under a wrong one (the console's --prefix), a room in use is unknown.
                raise UnknownRoom(
                    f"no room named {name!r} under the key prefix {self.prefix!r} has been used yet"
                ) from None
            elif str(exc).startswith("REFUSED "):  # a script refused the change, and made none
                raise ConfigError(str(exc).removeprefix("REFUSED ")) from None
            else:
                raise StoreError(f"{type(exc).__name__}: {exc}") from exc
        except FAILURES as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc
        if reply is _NO_SEED:
            # Once a room's life at most (its seed is then stored), and with a
            # deadline of its own: a call that takes up to twice the timeout.
            self._seeded.discard(name)
            return await self.call(script, room, now, *args, extra_keys=extra_keys)
        if seed:
            self._seeded.add(name)
        return reply

    async def warm(self) -> None:
        """Connect, learn Redis's time and load every script now, so that the
        first requests do not spend their deadline on it (the gate does this
        at its lifespan's startup). Failures raise StoreError."""
        await self._sync_clock()
        if isinstance(self.pipeline, ClusterPipelines):
            return  # a cluster's scripts are loaded on each node as it meets them
        try:
            await asyncio.gather(
                *(self._load(name) for name in self._scripts),
                *(self._warm_library(name) for name in self._functions),
            )
        except FAILURES as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc

    async def _warm_library(self, name: str) -> None:
        """``_load_library`` at startup: a server without functions (before
        Redis 7) or one that refuses them (an ACL) is sent the scripts,
        loaded beside, as a call would be. (It stopped the app starting.)"""
        with contextlib.suppress(_AsScript):
            await self._load_library(name)

    async def together(self, key: str, commands: Sequence[bytes]) -> list[Any]:
        """The replies to plain commands sent together (one round trip), on
        the node of ``key``. Failures are Redis's own (see FAILURES)."""
        pipeline = self.pipeline
        if isinstance(pipeline, ClusterPipelines):
            return list(await asyncio.gather(*(pipeline.send(command, key) for command in commands)))
        futures = [pipeline.send(command) for command in commands]
        for later in futures[1:]:
            later.add_done_callback(_retrieve)  # if an earlier one fails, nobody awaits it
        return [await future for future in futures]

    async def aclose(self) -> None:
        await self.pipeline.aclose()
