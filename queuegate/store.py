"""The line in Redis: one Lua script call per operation.

The rules of the line live in ``scripts/*.lua``; this module only builds keys,
passes arguments and turns replies into Python values. Every script starts
with ``advance.lua``, which brings the room up to date, so there is no
scheduler to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from .settings import ConfigError, Room, check_room_setting

__all__ = ["Outcome", "Store", "StoreError", "connect"]

State = Literal["active", "waiting", "closed", "pass", "none"]


class StoreError(Exception):
    """Redis could not answer: down, slow, or refused the command."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the line says about one visitor at ``now_ms`` (Redis time).

    ``rank`` is 0-based (``rank`` people are ahead); ``eta_ms`` is -1 when
    nothing bounds the wait (a paused room, or a capacity room before any
    session has ended).
    """

    state: State
    now_ms: int
    expires_ms: int = 0
    rank: int = 0
    line: int = 0
    eta_ms: int = -1
    poll_ms: int = 0
    joined: bool = False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load(name: str) -> str:
    return files(__package__).joinpath("scripts", name).read_text(encoding="utf-8")


def connect(url: str, timeout: float, max_connections: int = 50) -> aioredis.Redis:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URLs.

    Every socket operation is bounded by ``timeout``; one immediate retry
    covers a pooled connection that died with a Redis restart. At most
    ``max_connections`` are open; a request that finds them all busy waits
    for one (within the caller's timeout) instead of failing.
    """
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"redis_url must start with redis://, rediss:// or unix://, got {url.split('://')[0]!r}"
        )
    try:
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as exc:
        raise ConfigError(f"redis_url is not valid: {exc}") from None
    # from_pool: closing the client closes the pool and its connections.
    return aioredis.Redis.from_pool(pool)


class Store:
    """The rooms' state in one Redis (or cluster) under ``prefix``."""

    def __init__(self, client: aioredis.Redis, prefix: str = "qg") -> None:
        self.client = client
        self.prefix = prefix
        advance = _load("advance.lua")
        self._scripts = {
            name: client.register_script(advance + "\n" + _load(f"{name}.lua"))
            for name in ("enter", "remove", "stats", "configure")
        }

    def keys(self, room: str) -> list[str]:
        # One {room} hash tag for all of a room's keys: each script touches a
        # single cluster slot, and rooms spread over the cluster.
        base = f"{self.prefix}:{{{room}}}:"
        return [base + "seq", base + "waiting", base + "seen", base + "active", base + "state"]

    async def _call(self, script: str, room: Room, now: int | None, *args: str) -> Any:
        try:
            return await self._scripts[script](
                keys=self.keys(room.name),
                args=["" if now is None else str(now), *room.script_args, *args],
            )
        except RedisError as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc

    async def enter(self, room: Room, visitor: str, *, join: bool = True, now: int | None = None) -> Outcome:
        """A request from ``visitor``: pass, wait (joining if new), or closed."""
        reply = await self._call("enter", room, now, visitor, "1" if join else "0")
        state = _text(reply[0])
        if state == "active":
            return Outcome("active", int(reply[1]), expires_ms=int(reply[2]), joined=reply[3] == 1)
        if state == "waiting":
            return Outcome(
                "waiting",
                int(reply[1]),
                rank=int(reply[2]),
                line=int(reply[3]),
                eta_ms=int(reply[4]),
                poll_ms=int(reply[5]),
                joined=reply[6] == 1,
            )
        return Outcome(state, int(reply[1]))  # type: ignore[arg-type]

    async def release(self, room: Room, visitor: str, *, now: int | None = None) -> bool:
        """The protected action is done: free the slot for the next in line."""
        return bool(await self._call("remove", room, now, visitor, "released"))

    async def leave(self, room: Room, visitor: str, *, now: int | None = None) -> bool:
        """The visitor gives up their place (waiting or active)."""
        return bool(await self._call("remove", room, now, visitor, "left"))

    async def stats(self, room: Room, *, now: int | None = None) -> dict[str, int | float | str]:
        reply = await self._call("stats", room, now)
        out: dict[str, int | float | str] = {}
        for name, raw in zip(reply[::2], reply[1::2], strict=True):
            value = _text(raw)
            key = _text(name)
            if key == "status":
                out[key] = value
            elif key.endswith("per_minute"):
                out[key] = float(value)
            else:
                out[key] = int(float(value))
        return out

    async def configure(self, room: Room, *, now: int | None = None, **changes: Any) -> None:
        """Change run-time settings (seconds for durations); ``None`` resets one
        to the room's default from code. Checked before anything is written."""
        pairs: list[str] = []
        for name, value in changes.items():
            pairs += [name, "" if value is None else check_room_setting(name, value)]
        if pairs:
            await self._call("configure", room, now, *pairs)

    async def aclose(self) -> None:
        await self.client.aclose()
