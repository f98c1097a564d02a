"""queuegate: a virtual waiting room for ASGI apps, with the line in Redis."""

from importlib.machinery import EXTENSION_SUFFIXES as _EXTENSION_SUFFIXES

from . import gate as _gate
from .decisions import Admission, admission
from .gate import QueueGate
from .integrations.starlette import gated
from .options import Settings
from .settings import ConfigError, Health, Room
from .store import Outcome, Store, StoreError

__all__ = [
    "COMPILED",
    "Admission",
    "ConfigError",
    "Health",
    "Outcome",
    "QueueGate",
    "Room",
    "Settings",
    "Store",
    "StoreError",
    "admission",
    "gated",
]

__version__ = "0.1.0"

# Whether the request path runs compiled: an install built with mypyc
# (HATCH_BUILD_HOOK_ENABLE_MYPYC=true, see docs/performance.md), where its
# modules are extension modules, not Python files.
COMPILED: bool = (_gate.__file__ or "").endswith(tuple(_EXTENSION_SUFFIXES))
