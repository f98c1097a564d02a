"""A tiny flash-sale shop whose checkout sits behind a queuegate room."""

from .shop import create_app

__all__ = ["create_app"]
