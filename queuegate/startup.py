"""A gate's start, at its lifespan's startup: connect to Redis and load
the scripts before the app starts, and make each room of the code known
in Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import Message, Receive

from .rooms import Rooms
from .settings import Room
from .stats import described
from .store import Store, StoreError

__all__ = ["registered", "warming"]

logger = logging.getLogger("queuegate")


def warming(store: Store, rooms: Rooms, receive: Receive, started: Callable[[], None]) -> Receive:
    """At startup, connect to Redis and load the scripts before the app
    starts, so the first requests keep their whole deadline, make each
    room of the code known in Redis (templates aside), so that the
    console, a Store and the back office can pause it or set its rate
    before its first visitor, and tick those with somebody waiting (rooms
    of templates too); then look for a loss of Redis's data every few
    seconds (``queuegate.dataloss``). Redis not answering is logged, never
    fatal: gated requests fail closed (or open, as configured) until it
    answers. ``started()`` is called once the rooms are registered (where
    no lifespan ran, or Redis did not answer it, the first request does
    it: ``registered``)."""

    async def warming_receive() -> Message:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await store.warm()
            except StoreError as exc:
                logger.warning(
                    "queuegate: Redis did not answer at startup (%s); gated requests are answered "
                    "as each room's fail setting says until it does (closed: a 503 page, but for "
                    "visitors admitted before). Check the URL given as redis= or QUEUEGATE_REDIS_URL "
                    "from this host: queuegate --redis URL list",
                    exc,
                )
            else:
                await _register(store, rooms)
                started()  # (else the first request tries again)
            store.data_watch.start()  # a loss of Redis's data said, even while nobody waits
        return message

    return warming_receive


async def registered(store: Store, rooms: Rooms) -> None:
    """``_register`` where no lifespan ran (a task at the first request):
    Redis not answering is said, as at a lifespan's startup."""
    try:
        await _register(store, rooms)
    except StoreError as exc:
        logger.warning("queuegate: the rooms could not be registered at the first request (%s)", exc)
    except Exception:  # a bug: said, and the requests go on
        logger.exception("queuegate: the rooms could not be registered at the first request")


async def _register(store: Store, rooms: Rooms) -> None:
    """Make each plain room known in Redis, a hundred at a time (each
    call has a request's deadline); a room that could not be is logged,
    and appears at its first visitor instead. A room whose settings an
    operator changed at run time is logged too, a line each: those win
    over the code's, which a deploy may have just changed (and said
    again where together they leave the room no limit at all).

    A room with somebody waiting, plain or of a template, is ticked from
    now on (``queuegate.ticker``): a process ticks the rooms it has seen
    somebody wait in, so after every process restarted (a deploy, a
    crash) the line stood still until a waiting visitor asked, and each
    interval it stood lost its admissions (an auditor's finding)."""
    plain = [rooms[name].room for name in rooms]
    failed: list[StoreError] = []
    await _each(store, plain, failed, say=True)
    tried = len(plain)
    if rooms.has_templates:
        # The rooms of templates that have state in Redis (a scan of its
        # keys, once at startup: only a gate with templates pays for it).
        try:
            names = await store.room_names()
        except StoreError as exc:
            failed.append(exc)
        else:
            known = set(rooms)
            made = [room for room in map(rooms.room, names) if room is not None and room.name not in known]
            await _each(store, made, failed, say=False)
            tried += len(made)
    if failed:
        logger.warning(
            "queuegate: %d of %d rooms could not be registered at startup (%s); each appears to the "
            "console and the back office at its first visitor, and its line moves from then on",
            len(failed),
            tried,
            failed[0],
        )


async def _each(store: Store, rooms: list[Room], failed: list[StoreError], say: bool) -> None:
    """Each of ``rooms`` made known in Redis (``stats``), a hundred at a
    time; ticked if somebody waits in it; with ``say``, its settings set
    at run time logged."""
    for start in range(0, len(rooms), 100):
        batch = rooms[start : start + 100]
        done = await asyncio.gather(*(store.stats(room) for room in batch), return_exceptions=True)
        for room, result in zip(batch, done, strict=True):
            if isinstance(result, StoreError):
                failed.append(result)
                continue
            if isinstance(result, BaseException):
                raise result
            if result["waiting"] > 0:
                store.ticker.watch(room)
            if say and result["run_time"]:
                logger.warning(
                    "queuegate: room %r runs with settings set at run time, over the code's: %s "
                    "(`queuegate set %s --reset all` goes back to the code's)",
                    room.name,
                    described(result),
                    room.name,
                )
                if result["unlimited"]:
                    logger.warning(
                        "queuegate: room %r lets everyone in: its rate and capacity are both 0 "
                        "(no limit) with the settings set at run time over this code's",
                        room.name,
                    )
