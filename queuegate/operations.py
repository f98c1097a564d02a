"""Operators' changes to a room: a visitor's place released or taken away,
the line drained, the room forgotten, its run-time settings, and notes in
its activity log. Each is a room script's call, logged in the room's
activity log by the call that makes it (activity.lua), under ``who`` or,
by default, ``actor``: the console, the back office and the app's own
code alike; a forget, whose room's log goes with the room, in the log
aside (``note_aside``). ``Store`` has them (``store.configure(...)``), beside the
calls a request makes and the reads of ``queuegate.readings``."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .admissions import LocalAdmissions
from .calls import RoomRef, StoreError, UnknownRoom
from .farback import FarBack
from .fronts import FrontCopies
from .outcomes import text
from .readings import ACTIVITY_KEEP, Readings, aside_log
from .settings import ConfigError, check_room_setting
from .stats import figure, in_people_units

logger = logging.getLogger("queuegate")

__all__ = ["Operations", "aside_log"]


class Operations(Readings):
    """The changes, for ``Store``: its script calls and the copies each
    change makes stale in this process."""

    actor: str
    redis_now_ms: Callable[[], int]
    admissions: LocalAdmissions
    fronts: FrontCopies
    far_back: FarBack
    _call: Callable[..., Awaitable[Any]]

    async def release(self, room: RoomRef, visitor: str, *, now: int | None = None, who: str = "") -> bool:
        """The protected action is done: end the visitor's admission and free
        the slot for the next in line. ``False`` when they hold none (one
        still in line stays there, but in a passthrough room, which lets
        them through: :meth:`leave` takes them out). ``who``: the operator
        who does it, for the activity log."""
        return await self._remove(room, visitor, "released", now, who)

    async def leave(self, room: RoomRef, visitor: str, *, now: int | None = None, who: str = "") -> bool:
        """The visitor gives up their place (waiting or active); ``who``: the
        operator who takes it away, for the activity log."""
        return await self._remove(room, visitor, "left", now, who)

    async def _remove(self, room: RoomRef, visitor: str, why: str, now: int | None, who: str) -> bool:
        name = room if isinstance(room, str) else room.name
        self.admissions.forget(name, visitor)
        unknown = None
        try:
            return bool(await self._call("remove", room, now, visitor, why, who))
        except UnknownRoom as exc:
            unknown = exc  # handled below: no await inside a handler (tests/test_compiled.py)
        finally:
            # This process's next polls see the line it changed (the others
            # drop theirs when they hear of it).
            self.fronts.forget(name)
        # Named only (the console, the back office): a typo, or a room whose
        # data Redis lost, where copies of the visitor's admission would live
        # until the room's next tick. Revoked either way (revoke.lua), and
        # the caller still told of the unknown room.
        await self._call("revoke", name, now, visitor)
        said = f"{unknown} (or its data was lost); any copy of the admission of {visitor!r} revoked"
        raise UnknownRoom(said) from None

    async def drain(self, room: RoomRef, *, now: int | None = None, who: str | None = None) -> int:
        """Empty the line; active sessions run on. Returns how many lost their
        place. Logged under ``who`` (by default, ``actor``)."""
        name = room if isinstance(room, str) else room.name
        self.far_back.forget(name)
        try:
            return int(await self._call("drain", room, now, who or self.actor))
        finally:
            self.far_back.forget(name)  # (one built meanwhile may be of the line before)
            self.fronts.forget(name)

    async def forget(
        self, room: RoomRef, *, now: int | None = None, who: str | None = None
    ) -> tuple[int, int, int]:
        """Delete the room and everything Redis holds of it, unless anybody
        is in it (see forget.lua). Returns (0, 0, 0) when it is gone, else
        nothing was deleted: how many wait, how many have a session, and
        when the last session ends (ms). The room's own log goes with it,
        so a forget is logged aside (``note_aside``), under ``who`` (by
        default, ``actor``), with the settings it had set at run time; a
        failure to log it is a warning, not the forget's (it is done)."""
        name = room if isinstance(room, str) else room.name
        self.far_back.forget(name)
        try:
            reply = await self._call("forget", room, now)
        finally:
            self.far_back.forget(name)  # (one built meanwhile may be of the room before)
            self.fronts.forget(name)
        waiting, active, ends = (int(value) for value in reply[:3])
        if not (waiting or active):
            pairs = zip(map(text, reply[3::2]), map(text, reply[4::2]), strict=True)
            lost = {field: figure(field, value) for field, value in pairs}
            details = {"room": name, "set at run time": in_people_units(lost)}
            try:
                await self.note_aside(who or self.actor, "forget", details)
            except StoreError as exc:
                logger.warning("queuegate: room %r was forgotten, but not logged aside: %s", name, exc)
        return waiting, active, ends

    async def note_aside(self, who: str, action: str, details: dict[str, Any]) -> dict[str, Any]:
        """Log what concerns no one room (a run of virtual visitors), or a
        room no longer there (forgotten), in ``<prefix>:admin:activity``;
        the back office shows it beside the rooms' own logs. Its ``room``
        is ``None`` (any string is, or may be, a room's name)."""
        entry = {"at": self.redis_now_ms(), "who": who, "room": None, "action": action, "details": details}
        key = aside_log(self.prefix)
        await self.guard(self.client.lpush(key, json.dumps(entry, default=str)))
        await self.guard(self.client.ltrim(key, 0, ACTIVITY_KEEP - 1))
        return entry

    async def configure(
        self,
        room: RoomRef,
        *,
        now: int | None = None,
        who: str | None = None,
        reset_all: bool = False,
        **changes: Any,
    ) -> dict[str, str]:
        """Change run-time settings (seconds for durations); ``None`` resets one
        to the room's default from code. ``seed=...`` sets the lottery's secret.
        Everything is checked before anything is written: a health target
        for a room without one in code is refused (ConfigError), as nothing
        would measure it. ``rate`` and ``per`` are kept as one pair (see
        configure.lua). In a room with a health target, a value given for
        what its controller holds (the rate, or the capacity of a room
        without one) pins it, even beside ``pinned=None`` (which unpins).
        ``reset_all=True`` (``queuegate set --reset all``) resets every
        setting not given beside it and removes a pin, in the same call
        (a pin made meanwhile is wholly before or wholly after it).
        Logged under ``who`` (by default, ``actor``).
        Returns the fields written as Redis keeps them (ms for durations;
        "": back to the code's), the pair's other half included; with
        ``reset_all``, ``"reset_all"`` names the settings set at run time
        before it, comma-separated ("": none); ``"pinned": "1"`` when a
        value given took the setting a controller held (pinned it)."""
        pairs: list[str] = ["reset_all", "1"] if reset_all else []
        for name, value in changes.items():
            if name == "pinned":
                # Setting the rate or capacity pins them (configure.lua);
                # this only returns them to the controller.
                if value:
                    raise ConfigError("pinned: set the rate or capacity to pin it; pinned=None unpins")
                pairs += ["pinned", ""]
            elif name == "seed":
                if not isinstance(value, str) or len(value) < 8:
                    raise ConfigError("seed must be a string of at least 8 characters")
                pairs += ["seed", value, "seed_sha256", hashlib.sha256(value.encode()).hexdigest()]
            else:
                pairs += [name, "" if value is None else check_room_setting(name, value)]
        if pairs:
            name = room if isinstance(room, str) else room.name
            self.far_back.forget(name)
            shown = {key: "(secret)" if key == "seed" else value for key, value in changes.items()}
            # (A reset_all's log: configure.lua adds what it reset.)
            details = json.dumps(shown, default=str)
            try:
                reply = await self._call("configure", room, now, who or self.actor, details, *pairs)
            finally:
                # A view built during the call may be of the old settings;
                # where no subscription says the change (a cluster), it was
                # this process's answer near the front until it aged out.
                self.far_back.forget(name)
                self.fronts.forget(name)
            return {text(field): text(value) for field, value in zip(reply[::2], reply[1::2], strict=True)}
        return {}

    async def note(
        self, room: RoomRef, action: str, details: dict[str, Any], *, who: str | None = None
    ) -> None:
        """Log in the room's activity log what an operator did that changes
        nothing in the line (revealing the seed, say)."""
        await self._call("note", room, None, who or self.actor, action, json.dumps(details, default=str))
