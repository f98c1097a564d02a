"""Which spellings of a request path a room's patterns are matched against.

The rule: a room's idea of "this request goes to a protected page" must never
be narrower than the app's router's. Routers route on the path as the server
decoded it, minus the ``root_path`` the app is mounted under (Starlette's
``get_route_path``, Django's ``path_info``); proxies in front may fold case,
decode twice, read ``\\`` as ``/`` or resolve ``..``. So a path is matched in
several forms, and a room gates the request when **any** form matches:

1. the route path and the full path as the server gave them (case-folded and
   NFKC-folded only): exactly what a router compares; and what follows the
   ``root_path`` found anywhere in the path, as Litestar routes;
2. each of those folded further: percent-decoding repeated, ``\\`` as ``/``,
   ``;params`` and control characters dropped, duplicate and trailing slashes
   dropped, dot segments **kept** (``/checkout/..`` still starts with
   ``/checkout``, and routers dispatch it there);
3. the same with dot segments resolved, as a proxy in front might.

Folding only ever adds forms, so it gates more, never less. Bypass rules work
the other way: a request is bypassed only when every form is.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache, partial
from urllib.parse import unquote

from .settings import PLACEHOLDER

__all__ = ["CACHED_PATH_LENGTH", "compile_patterns", "fold", "forms", "normalise", "route_path"]

# Paths longer than this are folded on every request instead of cached, so
# hostile long URLs cannot grow a worker's memory: the cache holds at most
# 8,192 entries of at most this many characters (about 8 x 3 KB each).
CACHED_PATH_LENGTH = 512

# Control characters are dropped (a translation table: a regex took 0.5 ms
# on a 60 KB path).
_CONTROL = dict.fromkeys([*range(0x20), 0x7F])
_STAR = "\ue000"
_SLOT = "\ue001"


def route_path(path: str, root_path: str) -> str:
    """The path an app's router sees: ``path`` minus the ``root_path`` it is
    mounted under, when ``path`` starts with it (as Starlette routes)."""
    if root_path and path.startswith(root_path):
        rest = path[len(root_path) :]
        if not rest or rest[0] == "/":
            return rest or "/"
    return path


def fold(path: str) -> str:
    """Unicode look-alikes (NFKC) and case folded together."""
    return unicodedata.normalize("NFKC", path).casefold()


def _canonical(path: str, resolve: bool) -> str:
    for _ in range(4):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    path = fold(path).replace("\\", "/").translate(_CONTROL)
    segments: list[str] = []
    for segment in path.split("/"):
        segment = segment.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == ".." and resolve:
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def normalise(path: str) -> str:
    """The most folded form of a path: decoded, case-folded, dot segments
    resolved. (One of the forms a room is matched against; see ``forms``.)"""
    return _canonical(path, resolve=True)


def _forms(path: str, root_path: str) -> tuple[str, ...]:
    bases = [route_path(path, root_path)]
    if path != bases[0]:
        bases.append(path)
    if root_path and not path.startswith(root_path):
        # Servers that leave the prefix out of `path` (hypercorn): the path
        # as the client sent it through the proxy.
        bases.append(root_path + path)
    if root_path and root_path in path:
        # Litestar routes on what follows the first `root_path` anywhere in
        # the path, even inside a segment ("/x/shopcheckout").
        bases.append(path.split(root_path, 1)[1])
    found: dict[str, None] = {}
    for base in bases:
        found[fold(base) or "/"] = None
    for base in bases:
        found[_canonical(base, resolve=False)] = None
    for base in bases:
        found[_canonical(base, resolve=True)] = None
    return tuple(found)


_cached_forms = lru_cache(maxsize=8192)(_forms)


def forms(path: str, root_path: str = "") -> tuple[str, ...]:
    """Every form of a request path that rooms are matched against, the
    router's own first (see the module's docstring)."""
    if len(path) + len(root_path) <= CACHED_PATH_LENGTH:
        return _cached_forms(path, root_path)
    return _forms(path, root_path)


def _slot(slots: dict[str, str], found: re.Match[str]) -> str:
    return slots[found[1]]


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile a room's glob patterns: ``*`` matches anything, ``/`` too, and
    ``{name}`` one path segment, captured under that name.

    Patterns are folded like paths (decoded, case-folded, dot segments
    resolved), so ``/Checkout*`` and ``/checkout*`` are the same pattern.
    """
    compiled = []
    for pattern in patterns:
        names = PLACEHOLDER.findall(pattern)
        # Private-use characters stand in for '*' and each {name} while the
        # pattern is normalised, so they survive decoding and case folding.
        slots = {name: f"{_SLOT}{i}{_SLOT}" for i, name in enumerate(names)}
        marked = PLACEHOLDER.sub(partial(_slot, slots), pattern)
        canonical = normalise(marked.replace("*", _STAR))
        regex = ""
        for i, piece in enumerate(canonical.split(_SLOT)):
            if i % 2:
                regex += f"(?P<{names[int(piece)]}>[^/]+)"
            else:
                regex += ".*".join(re.escape(part) for part in piece.split(_STAR))
        compiled.append(re.compile(regex, re.DOTALL))
    return compiled
