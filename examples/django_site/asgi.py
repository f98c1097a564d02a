"""The ASGI entry: Django's app behind QueueGate. The signed-in user (from
Django's session cookie) holds one place per room across devices.

Needs Django and uvicorn: ``pip install -e ".[examples]"`` in the clone (not
from PyPI: that name there is not this project), then

    export QUEUEGATE_REDIS_URL=redis://localhost:6379/0
    export QUEUEGATE_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    uvicorn examples.django_site.asgi:application    # not --lifespan on: Django refuses the lifespan

Its keys have a prefix of their own (``example-django``, or $QUEUEGATE_PREFIX).
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.asgi import get_asgi_application
from starlette.requests import Request

from queuegate import QueueGate, Room

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_site.settings")


def django_user(request: Request) -> str | None:
    """The user id in Django's session (signed-cookie sessions need no
    database; with database sessions, load the session the same way)."""
    from django.contrib.sessions.backends.signed_cookies import SessionStore

    key = request.cookies.get(settings.SESSION_COOKIE_NAME)
    if not key:
        return None
    user: Any = SessionStore(session_key=key).get("user_id")
    return None if user is None else str(user)


def create_app(**gate_options: Any) -> QueueGate:
    rooms = [Room("sale", capacity=1, session=300), Room("ticket-{event}", rate=2, per=10)]
    options = {"prefix": os.environ.get("QUEUEGATE_PREFIX", "example-django"), **gate_options}
    return QueueGate(get_asgi_application(), rooms=rooms, identify=django_user, **options)


if os.environ.get("QUEUEGATE_REDIS_URL"):
    application = create_app()
