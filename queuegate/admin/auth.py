"""Who may use the back office, and proof that a change came from its page.

Authentication is the integrator's: ``auth`` is a callable on the request
that returns the operator's name (kept in the activity log) or None to refuse.
Without one, ``secret`` turns on a login form: the secret, typed once, gives a
signed session cookie for ``SESSION_HOURS``. With neither, every request is
refused: the back office never runs open by accident.

Every change is a POST carrying the CSRF token of the page it came from
(a double-submit cookie, SameSite=Strict, echoed in a header that a page on
another site can neither read nor send without the browser asking first) and,
when the browser names one, an Origin equal to the back office's own.
"""

from __future__ import annotations

import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

Auth = Callable[[Request], str | Awaitable[str | None] | None]

SESSION_COOKIE = "queuegate_admin"
CSRF_COOKIE = "queuegate_admin_csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_HOURS = 12
MAX_NAME = 40  # characters of a name typed at sign-in


class Guard:
    """The back office's door: ``operator(request)`` names who is asking."""

    def __init__(self, auth: Auth | None, secret: str | None) -> None:
        if secret is not None and len(secret) < 12:
            raise ValueError("the back office's secret must be at least 12 characters")
        self.auth = auth
        self.secret = secret
        self._sessions = URLSafeTimedSerializer(secret, salt="queuegate.admin.session") if secret else None

    @property
    def configured(self) -> bool:
        return self.auth is not None or self.secret is not None

    @property
    def login_form(self) -> bool:
        return self.auth is None and self.secret is not None

    async def operator(self, request: Request) -> str | None:
        if self.auth is not None:
            name = self.auth(request)
            if inspect.isawaitable(name):
                name = await name
            return name or None
        if self._sessions is None:
            return None
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer ") and self.secret_matches(bearer.removeprefix("Bearer ")):
            return "admin (token)"
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        try:
            name = self._sessions.loads(cookie, max_age=SESSION_HOURS * 3600)
        except BadSignature:
            return None
        return name if isinstance(name, str) else None

    def secret_matches(self, offered: str) -> bool:
        assert self.secret is not None
        return hmac.compare_digest(offered.encode(), self.secret.encode())

    def session_cookie(self, name: str) -> str:
        assert self._sessions is not None
        return str(self._sessions.dumps(name))


def operator_name(typed: str) -> str:
    """The name an operator typed at sign-in, for the activity log, marked
    as typed there: ``ada (back office)``; "admin" when none. Its printable
    characters but the log's separators (``·``, brackets), spaces
    collapsed, 40 at most, so that it cannot pass for another origin
    (``console (user@host)``, ``admin (token)``) or another field. Under one
    shared secret it is as declared: it tells operators apart, it proves
    nobody's identity (``auth=`` does)."""
    kept = "".join(ch for ch in typed if ch.isprintable() and ch not in "·()[]{}<>")
    name = " ".join(kept.split())[:MAX_NAME]
    return f"{name} (back office)" if name else "admin"


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def same_origin(request: Request) -> bool:
    """The browser's Origin (when it sends one) is the back office's own."""
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    host = request.headers.get("host", "")
    return origin in (f"{request.url.scheme}://{host}",)


def csrf_ok(request: Request) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    header = request.headers.get(CSRF_HEADER, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), header.encode()) and same_origin(request)
