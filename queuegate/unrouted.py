"""Rooms whose path patterns match no route of the app, said at startup.

A room guards what its patterns match, whatever the app routes: a typo
(``paths=["/ticket"]`` before a route ``/tickets``) gates a path nobody
asks for and lets the real page through, without a word. Where the app
is Starlette's or FastAPI's (reached through any middleware that keeps the
next app as ``.app``), each room is tried both ways, each side by its own
matching: each route's path with its parameters filled in
(``/tickets/{event}/buy`` as ``/tickets/x/buy``) against the room's
patterns, by the gate's (``queuegate.paths``); and sample paths of each
pattern (``*`` as nothing, a segment or two; ``{name}`` as a segment)
against the routes, by Starlette's own ``matches``. A room neither finds is
logged, with the routes most like its patterns. Under a mounted app
without routes of its own, anything counts as routed. An app whose routes
cannot all be read (Django, Litestar, a plain ASGI callable, a ``Host``
route) is not judged, and nothing here can stop an app from starting: a
failure to read the routes is logged at debug level and ignored.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from starlette.routing import BaseRoute, Host, Match, Mount

from .paths import compile_patterns, forms
from .settings import PLACEHOLDER, Room

__all__ = ["say_unrouted"]

logger = logging.getLogger("queuegate")

MAX_DEPTH = 32  # middlewares walked through to find the app's routes, and mounts into them
STARS = ("", "x", "x/x")  # what a '*' stands for in a pattern's sample paths
MAX_SAMPLES = 27  # sample paths of one pattern (three stars' worth)
PARAMETER = re.compile(r"\{[^}]*\}")  # a route's path parameter, {name} or {name:converter}


def _routes_of(app: Any) -> Sequence[BaseRoute] | None:
    """The routes of ``app``, or of the app it wraps, as deep as the
    middlewares keep the next one as ``.app``; ``None``: none found, or
    not all Starlette's."""
    for _ in range(MAX_DEPTH):
        routes = getattr(app, "routes", None)
        if isinstance(routes, list) and routes:
            return routes if all(isinstance(route, BaseRoute) for route in routes) else None
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def _inner(route: Mount) -> Sequence[BaseRoute] | None:
    """A mount's own routes (``[]``: an app of its own); ``None``: not
    Starlette's."""
    inner = route.routes
    if not isinstance(inner, list) or not all(isinstance(each, BaseRoute) for each in inner):
        return None
    return inner


def _served(routes: Sequence[BaseRoute], prefix: str, depth: int) -> list[str] | None:
    """The paths ``routes`` serve, as written (``/tickets/{event}``);
    ``None``: a route that cannot be read."""
    if depth > MAX_DEPTH:
        return None
    paths: list[str] = []
    for route in routes:
        if isinstance(route, Host):
            return None
        if isinstance(route, Mount):
            inner = _inner(route)
            if inner is None:
                return None
            below = _served(inner, prefix + route.path, depth + 1)
            if below is None:
                return None
            paths += below
            continue
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            return None
        paths.append(prefix + path)
    return paths


def _routes(path: str, routes: Sequence[BaseRoute], depth: int = 0) -> bool:
    """Whether Starlette would route ``path`` (any method) to one of
    ``routes``; a mounted app without routes routes all beneath it."""
    if depth > MAX_DEPTH:
        return False
    scope = {"type": "http", "path": path, "root_path": "", "method": "GET", "headers": []}
    for route in routes:
        if isinstance(route, Mount):
            found = route.path_regex.match(path)
            if found is None:
                continue
            inner = _inner(route)
            if not inner or _routes("/" + found["path"], inner, depth + 1):
                return True
            continue
        if route.matches(scope)[0] != Match.NONE:
            return True
    return False


def _samples(pattern: str) -> list[str]:
    """Paths a pattern matches: each ``*`` as one of STARS, each
    ``{name}`` as a segment."""
    pieces = PLACEHOLDER.sub("x", pattern).split("*")
    fills = itertools.islice(itertools.product(STARS, repeat=len(pieces) - 1), MAX_SAMPLES)
    return ["".join(itertools.chain.from_iterable(zip(pieces, (*fill, ""), strict=True))) for fill in fills]


def _unrouted(app: Any, rooms: Iterable[Room]) -> None:
    routes = _routes_of(app)
    if routes is None:
        return
    served = _served(routes, "", 0)
    if served is None:
        return
    forms_served = [form for path in served for form in forms(PARAMETER.sub("x", path) or "/")]
    for room in rooms:
        if not room.paths:
            continue  # bound to routes by name: nothing to match
        patterns = compile_patterns(room.paths)
        if any(pattern.fullmatch(form) for pattern in patterns for form in forms_served):
            continue
        if any(_routes(sample, routes) for pattern in room.paths for sample in _samples(pattern)):
            continue
        like = sorted({p for pattern in room.paths for p in difflib.get_close_matches(pattern, served, n=3)})
        logger.warning(
            "queuegate: room %r has paths %s that match no route of the app, so it gates no page the app "
            "serves: check the patterns%s",
            room.name,
            list(room.paths),
            f" (the app's routes most like them: {', '.join(like)})" if like else "",
        )


def say_unrouted(app: Any, rooms: Iterable[Room]) -> None:
    """Log each room whose path patterns match none of ``app``'s routes
    (see the module); never raises."""
    try:
        _unrouted(app, rooms)
    except Exception:  # an app's routes are its own: reading them must not stop it starting
        logger.debug("queuegate: the app's routes could not be read to check the rooms' paths", exc_info=True)
