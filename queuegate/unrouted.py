"""Rooms whose path patterns match no route of the app, said at startup.

A room guards what its patterns match, whatever the app routes: a typo
(``paths=["/ticket"]`` before a route ``/tickets``) gates a path nobody
asks for and lets the real page through, without a word. Where the app
shows its routes (Starlette's and FastAPI's, through any middleware that
keeps the next app as ``.app``), each route's path, its parameters filled
in (``/tickets/{event}/buy`` as ``/tickets/x/buy``), is matched against
each room's patterns by the gate's own matching (``queuegate.paths``); a
room that matches none is logged once at startup, with the routes most
like its patterns. A pattern under a mounted app without routes of its
own counts as routed. An app whose routes cannot be read (Django, a plain
ASGI callable, a ``Host`` route) is not judged: nothing is said.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .paths import compile_patterns, forms, normalise
from .settings import Room

__all__ = ["say_unrouted"]

logger = logging.getLogger("queuegate")

MAX_DEPTH = 32  # middlewares walked through to find the app's routes
PARAMETER = re.compile(r"\{[^}]*\}")  # a route's path parameter, {name} or {name:converter}


def _routes_of(app: Any) -> Sequence[Any] | None:
    """The routes of ``app``, or of the app it wraps, as deep as the
    middlewares keep the next one as ``.app``; ``None``: none found."""
    for _ in range(MAX_DEPTH):
        routes = getattr(app, "routes", None)
        if isinstance(routes, list) and routes:
            return routes
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def _paths(routes: Iterable[Any], prefix: str, found: list[str], mounted: list[str]) -> bool:
    """The paths ``routes`` serve into ``found`` (parameters as written),
    the prefixes of mounted apps without routes into ``mounted``; False
    when a route cannot be read."""
    for route in routes:
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            return False  # a Host, or a route of another kind
        inner = getattr(route, "routes", None)
        if isinstance(inner, list) and inner:
            if not _paths(inner, prefix + path, found, mounted):
                return False
        elif hasattr(route, "routes"):  # a Mount of an app: its paths are its own
            mounted.append(normalise(prefix + path))
        else:
            found.append(prefix + path)
    return True


def _literal(pattern: str) -> str:
    """The part of a pattern before its first ``*`` or ``{``."""
    return normalise(re.split(r"[*{]", pattern, maxsplit=1)[0])


def say_unrouted(app: Any, rooms: Iterable[Room]) -> None:
    """Log each room with path patterns that match none of ``app``'s
    routes (see the module)."""
    routes = _routes_of(app)
    found: list[str] = []
    mounted: list[str] = []
    if routes is None or not _paths(routes, "", found, mounted):
        return
    served = [form for path in found for form in forms(PARAMETER.sub("x", path) or "/")]
    for room in rooms:
        if not room.paths:
            continue  # bound to routes by name: nothing to match
        patterns = compile_patterns(room.paths)
        if any(pattern.fullmatch(path) for pattern in patterns for path in served):
            continue
        if any(_literal(p).startswith(prefix) for p in room.paths for prefix in mounted):
            continue
        like = sorted({p for pattern in room.paths for p in difflib.get_close_matches(pattern, found, n=3)})
        logger.warning(
            "queuegate: no route of the app matches room %r's paths %s, so the room gates no page the app "
            "serves: check the patterns%s",
            room.name,
            list(room.paths),
            f" (the app's routes most like them: {', '.join(like)})" if like else "",
        )
