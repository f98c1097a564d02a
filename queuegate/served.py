"""A gate that is not served, said at the app's startup.

With ``gate = QueueGate(app, ...)``, a server given ``app`` instead of
``gate`` never calls the gate: every request reaches the app unqueued, and
nothing is logged (a newcomer's trial: ``uvicorn shop:app``, and each
/checkout answered 200). Where the app is Starlette's or FastAPI's
(reached through any middleware that keeps the next app as ``.app``), the
gate wraps its router's ``lifespan_context``; a gate's lifespan marks the
context it passes on, so the router's lifespan starting without any of its
gates' marks means the server was handed the app behind them, and that is
logged as an error. A gate added with ``add_middleware`` is in the app's
own stack, so its lifespan always comes first. Nothing can be hooked in a
Django, Litestar or plain ASGI app, nor without a lifespan (``--lifespan
off``); and nothing here stops an app from starting.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from starlette.routing import Router

if TYPE_CHECKING:
    from .gate import QueueGate

__all__ = ["Served", "passing", "watch_served"]

logger = logging.getLogger("queuegate")

MAX_DEPTH = 32  # middlewares walked through to find the app's router
# The gates whose lifespan the current one passed through, outermost first.
_PASSED: ContextVar[tuple[object, ...]] = ContextVar("queuegate_passed", default=())


class Served:
    """A gate as the router it wraps knows it: weakly, so that a gate made
    and dropped (a test's, a script's) is no gate to serve; and through
    this plain object, since a class compiled with mypyc (the gate's) takes
    no weak reference. Only the gate holds it, and it holds nothing of the
    gate but its rooms' names and identity. (A gate holds cycles of its
    own: dropped, it is forgotten at the garbage collector's next pass.)"""

    def __init__(self, gate: QueueGate) -> None:
        self.rooms = tuple(room.name for room in gate.settings.rooms)
        self.gate_id = id(gate)


@contextmanager
def passing(served: Served) -> Iterator[None]:
    """Around a gate's call of its app's lifespan: the app's router sees
    that it came through the gate."""
    token = _PASSED.set((*_PASSED.get(), served))
    try:
        yield
    finally:
        _PASSED.reset(token)


class _Watched:
    """A router's lifespan context, said as not served at its start when no
    gate in front of the router passed the lifespan on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gates: weakref.WeakSet[Served] = weakref.WeakSet()

    def __call__(self, app: Any) -> AbstractAsyncContextManager[Any]:
        gates = list(self.gates)
        passed = _PASSED.get()
        if gates and not any(served in passed for served in gates):
            _say_not_served(gates, app)
        return self.inner(app)  # type: ignore[no-any-return]


def _router_of(app: Any) -> Router | None:
    for _ in range(MAX_DEPTH):
        if isinstance(app, Router):
            return app
        router = getattr(app, "router", None)
        if isinstance(router, Router):
            return router
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def watch_served(gate: QueueGate, app: Any) -> Served:
    """Have ``app``'s router (if it is Starlette's) say at its lifespan's
    start that ``gate`` was left out; never raises. The gate passes what
    this returns to ``passing``, and keeps it."""
    served = Served(gate)
    try:
        router = _router_of(app)
        if router is not None:
            watched = router.lifespan_context
            if not isinstance(watched, _Watched):
                watched = _Watched(watched)
                router.lifespan_context = watched
            watched.gates.add(served)
    except Exception:  # an app's insides are its own: looking into them must not stop it starting
        logger.debug("queuegate: the app's router could not be watched for a gate not served", exc_info=True)
    return served


def _name_of(identity: int) -> str | None:
    """``module:name`` of a module's global bound to the object of
    ``identity``, as a server is given it (``None``: none, or only in
    ``__main__``)."""
    for module_name, module in list(sys.modules.items()):
        names = getattr(module, "__dict__", None)
        if module_name == "__main__" or not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            if id(value) == identity and not name.startswith("_"):
                return f"{module_name}:{name}"
    return None


def _say_not_served(gates: list[Served], app: Any) -> None:
    rooms = sorted({room for served in gates for room in served.rooms})
    gate_name = next((name for name in (_name_of(served.gate_id) for served in gates) if name), None)
    app_name = _name_of(id(app))
    if gate_name is not None:
        serve = f"run `uvicorn {gate_name}`" + (f", not `uvicorn {app_name}`" if app_name else "")
    else:
        serve = "with gate = QueueGate(app, ...), run `uvicorn module:gate`"
    logger.error(
        "queuegate: the gate is not being served, so its rooms (%s) gate nothing: the app started "
        "without passing through the QueueGate that wraps it. Requests to the rooms' paths reach the "
        "app unqueued, and a route gated on itself (queue(...), gated) answers 500 (it finds no gate). "
        "Serve the QueueGate object, not the app it wraps (%s), or add it to the app with "
        "app.add_middleware(QueueGate, ...). (Tests of the app alone, or a parent app that runs "
        "this app's lifespan itself, meet this too: there it is no fault.)",
        ", ".join(rooms),
        serve,
    )
