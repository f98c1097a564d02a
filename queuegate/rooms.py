"""Which room a request belongs to, and the operator's handle on each room.

Plain rooms are named in code. A template room (``Room("ticket-{event}",
paths=["/tickets/{event}/buy*"])``) makes one room per value of its
placeholders on first visit; its name is derived from the path, so nothing
has to be declared per event, and its title may be too (a template's
``title`` may be a function of the values).

A request matches a room when any form of its path does (``paths.forms``)
and its method, upper-cased as routers compare it, is not one of the room's
``open_methods`` (with the deprecated ``methods``: is one of those; a room
that gates GET that way gates HEAD, which routers send to GET handlers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from .paths import CACHED_PATH_LENGTH, compile_patterns, fold, forms
from .settings import PLACEHOLDER, Room
from .store import Store

__all__ = ["RoomControl", "Rooms", "room_key"]

_SAFE = re.compile(r"[a-z0-9_-]{1,40}")


def room_key(value: str) -> str:
    """The part of a derived room's name that stands for one path segment:
    the segment itself when short and plain (after case folding), else a hash
    of it, so every value gives a valid and distinct name."""
    return value if _SAFE.fullmatch(value) else "h" + hashlib.sha256(value.encode()).hexdigest()[:24]


class RoomControl:
    """Run-time control of one room: what the operator's console does too."""

    def __init__(self, store: Store, room: Room) -> None:
        self.store = store
        self.room = room

    @property
    def name(self) -> str:
        return self.room.name

    async def configure(self, **changes: Any) -> None:
        """E.g. ``configure(rate=50)``, ``configure(status="paused")``;
        ``None`` goes back to the default from code."""
        await self.store.configure(self.room, **changes)

    async def stats(self) -> dict[str, Any]:
        return await self.store.stats(self.room)

    async def release(self, visitor: str) -> bool:
        return await self.store.release(self.room, visitor)

    async def leave(self, visitor: str) -> bool:
        return await self.store.leave(self.room, visitor)

    async def drain(self) -> int:
        return await self.store.drain(self.room)

    async def visitors(self, count: int = 10) -> dict[str, list[tuple[str, int]]]:
        return await self.store.visitors(self.room, count)

    async def seed(self) -> str | None:
        return await self.store.seed(self.room)

    def __repr__(self) -> str:
        return f"RoomControl({self.room.name!r})"


class Rooms(Mapping[str, RoomControl]):
    """The gate's rooms: ``rooms["sale"]`` or ``rooms["ticket-42"]`` (a room of
    a template) is a :class:`RoomControl`. Iterating gives the plain rooms;
    ``Store.room_names()`` lists every room that has state in Redis."""

    def __init__(self, rooms: Sequence[Room], store: Store) -> None:
        self.store = store
        self._plain = {room.name: room for room in rooms if not room.placeholders}
        self._templates = [room for room in rooms if room.placeholders]
        self._matchers = [
            (pattern, frozenset(room.open_methods), _methods(room.methods), room)
            for room in rooms
            for pattern in compile_patterns(room.paths)
        ]
        self._names = [(_name_pattern(room.name), room) for room in self._templates]
        self._derive = lru_cache(maxsize=10_000)(self._derive_uncached)
        self._cached_find = lru_cache(maxsize=8192)(self._find)

    def match(self, path: str, method: str = "GET", root_path: str = "") -> Room | None:
        """The room that gates a request, if any: the first whose patterns
        cover a form of its path (the router's own form first). For a
        template whose ``accept`` refuses the values, the template itself
        (a room with placeholders: the gate answers 404 for it)."""
        if len(path) + len(root_path) + len(method) <= CACHED_PATH_LENGTH:
            found = self._cached_find(path, root_path, method)
        else:
            found = self._find(path, root_path, method)
        if found is None:
            return None
        room, values = found
        return self._room(room, values) if room.placeholders else room

    def _find(self, path: str, root_path: str, method: str) -> tuple[Room, dict[str, str]] | None:
        method = method.upper()
        for form in forms(path, root_path):
            for pattern, open_methods, only, room in self._matchers:
                if method in open_methods or (only is not None and method not in only):
                    continue
                found = pattern.fullmatch(form)
                if found is not None:
                    return room, found.groupdict()
        return None

    def _room(self, room: Room, values: dict[str, str]) -> Room:
        if not room.placeholders:
            return room
        if room.accept is not None and not room.accept(dict(values)):
            return room
        return self._derive(room, _derived_name(room.name, values))

    def for_route(self, name: str, path_params: Mapping[str, Any]) -> Room | None:
        """The room named ``name`` for a request a router dispatched: a plain
        room, or the room a template makes from the route's parameters (the
        template itself when ``accept`` refuses them). ``None`` if no room
        has that name."""
        room = self._plain.get(name)
        if room is not None:
            return room
        for template in self._templates:
            if template.name == name:
                values = {key: fold(str(path_params.get(key, ""))) for key in template.placeholders}
                return self._room(template, values)
        return None

    def room(self, name: str) -> Room | None:
        """A room by its name: a plain one, or one made from a template."""
        if name in self._plain:
            return self._plain[name]
        for pattern, template in self._names:
            if pattern.fullmatch(name):
                return self._derive(template, name)
        return None

    def _derive_uncached(self, template: Room, name: str) -> Room:
        if not callable(template.title):
            return dataclasses.replace(template, name=name, accept=None)
        # From the name, not the request: the room a status poll, a stream or
        # the console finds by name gets the title its first visit got.
        values = _name_values(template, name)
        return dataclasses.replace(template, name=name, accept=None, title=template.title(values))

    def __getitem__(self, name: str) -> RoomControl:
        room = self.room(name)
        if room is None:
            raise KeyError(name)
        return RoomControl(self.store, room)

    def __iter__(self) -> Iterator[str]:
        return iter(self._plain)

    @property
    def has_templates(self) -> bool:
        """Whether some room is made per value (a name with placeholders)."""
        return bool(self._templates)

    def __len__(self) -> int:
        return len(self._plain)


def _methods(methods: Sequence[str] | None) -> frozenset[str] | None:
    """The only methods a room gates, by the deprecated ``methods``."""
    if methods is None:
        return None
    upper = {method.upper() for method in methods}
    return frozenset(upper | {"HEAD"} if "GET" in upper else upper)


def _derived_name(template: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: room_key(values[m[1]]), template)


def _name_values(template: Room, name: str) -> dict[str, str]:
    """The placeholders' values in a derived room's name, as ``room_key``
    wrote them."""
    found = _name_pattern(template.name).fullmatch(name)
    if found is None:  # pragma: no cover - the name was made from the template
        raise KeyError(name)
    values: dict[str, str] = {}
    for placeholder, value in zip(PLACEHOLDER.findall(template.name), found.groups(), strict=True):
        values.setdefault(placeholder, value)
    return values


def _name_pattern(template: str) -> re.Pattern[str]:
    parts = PLACEHOLDER.split(template)
    regex = "".join(
        re.escape(part) if i % 2 == 0 else f"({_SAFE.pattern}|h[0-9a-f]{{24}})"
        for i, part in enumerate(parts)
    )
    return re.compile(regex)
