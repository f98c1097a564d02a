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
from urllib.parse import unquote

__all__ = ["compile_patterns", "normalise"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SLASHES = re.compile(r"/{2,}")
_STAR = "\ue000"


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


def compile_patterns(patterns: Sequence[str]) -> re.Pattern[str]:
    """One regex for a room's glob patterns: ``*`` matches anything, ``/`` too.

    Patterns are normalised like paths, so ``/Checkout*`` and ``/checkout*``
    are the same pattern.
    """
    parts = []
    for pattern in patterns:
        # A private-use character stands in for '*' while the pattern is
        # normalised, so the star survives decoding and case folding.
        canonical = normalise(pattern.replace("*", _STAR))
        parts.append(".*".join(re.escape(piece) for piece in canonical.split(_STAR)))
    return re.compile("|".join(f"(?:{p})" for p in parts))
