"""queuegate: a virtual waiting room for ASGI apps, with the line in Redis."""

from .decisions import Admission, admission
from .gate import QueueGate
from .integrations.starlette import gated
from .settings import ConfigError, Health, Room, Settings
from .store import Outcome, Store, StoreError

__all__ = [
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
