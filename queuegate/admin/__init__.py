"""The back office: mount it into your app, behind your own auth.

    from queuegate import admin
    app.mount("/admin", admin.app(store, auth=lambda request: request.user.display_name or None))

or, without an auth of your own, a sign-in form with one secret:

    app.mount("/admin", admin.app(store, secret=os.environ["QUEUEGATE_ADMIN_SECRET"]))

or beside the app: ``queuegate serve-admin --redis URL`` (the secret from
QUEUEGATE_ADMIN_SECRET). See ``office.app`` for the options.
"""

from .auth import Guard
from .office import app

__all__ = ["Guard", "app"]
