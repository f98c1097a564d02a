"""Path normalisation and room matching.

Routers and servers disagree about paths: some decode twice, some ignore
case, some fold ``\\`` into ``/`` or strip ``;params``. A room must cover
every spelling an app might route to its pages, so matching runs on a
canonical form that folds all of those together. Folding more than the app
does only ever gates more, never less. The request itself is forwarded
unchanged.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache, partial
from urllib.parse import unquote

from .settings import PLACEHOLDER

__all__ = ["compile_patterns", "normalise"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SLASHES = re.compile(r"/{2,}")
_STAR = "\ue000"
_SLOT = "\ue001"


@lru_cache(maxsize=10_000)
def normalise(path: str) -> str:
    """The canonical form of a request path, used only to decide what is gated.

    Percent-decoding is repeated until nothing changes (double encoding),
    backslashes count as slashes, ``;params`` and control characters are
    dropped, Unicode look-alikes are folded (NFKC), case is folded, duplicate
    slashes collapse, dot segments are resolved without climbing above the
    root, and a trailing slash is dropped (``/checkout/`` is ``/checkout``).
    """
    for _ in range(4):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    path = unicodedata.normalize("NFKC", path).casefold()
    path = _CONTROL.sub("", path.replace("\\", "/"))
    segments: list[str] = []
    for segment in _SLASHES.sub("/", "/" + path).split("/"):
        segment = segment.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def _slot(slots: dict[str, str], found: re.Match[str]) -> str:
    return slots[found[1]]


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile a room's glob patterns: ``*`` matches anything, ``/`` too, and
    ``{name}`` one path segment, captured under that name.

    Patterns are normalised like paths, so ``/Checkout*`` and ``/checkout*``
    are the same pattern.
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
        compiled.append(re.compile(regex))
    return compiled
