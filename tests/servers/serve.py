"""Serve one of the shop apps with a real server, for the raw-socket tests:

    python -m tests.servers.serve SERVER ROUTER MODE PORT REDIS_URL PREFIX [ROOT_PATH]

SERVER is uvicorn-h11, uvicorn-httptools, hypercorn, granian (its Rust
HTTP/1.1 parser, one worker) or daphne (Twisted's, as Django Channels
serves).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from starlette.types import ASGIApp

from .apps import build

ARGS = "QGDEV_SERVE_ARGS"  # granian builds the app in its worker, from these


def factory() -> ASGIApp:
    """The app for granian's worker process (``factory=True``)."""
    router, mode, redis_url, prefix = json.loads(os.environ[ARGS])
    return build(router, mode, redis_url, prefix)


def main(argv: list[str]) -> None:
    server, router, mode, port, redis_url, prefix, *rest = argv
    root_path = rest[0] if rest else ""
    if server == "granian":
        from granian import Granian
        from granian.constants import HTTPModes, Interfaces
        from granian.log import LogLevels

        os.environ[ARGS] = json.dumps([router, mode, redis_url, prefix])
        Granian(
            "tests.servers.serve:factory",
            address="127.0.0.1",
            port=int(port),
            interface=Interfaces.ASGI,
            http=HTTPModes.http1,
            factory=True,
            url_path_prefix=root_path or None,
            log_level=LogLevels.warning,
        ).serve()
        return
    app = build(router, mode, redis_url, prefix)
    if server.startswith("uvicorn"):
        import uvicorn

        http = "h11" if server == "uvicorn-h11" else "httptools"
        uvicorn.run(
            app, host="127.0.0.1", port=int(port), http=http, root_path=root_path, log_level="warning"
        )
    elif server == "daphne":
        from daphne.server import Server

        endpoint = f"tcp:port={port}:interface=127.0.0.1"
        Server(app, endpoints=[endpoint], root_path=root_path, verbosity=0).run()
    else:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.root_path = root_path
        config.loglevel = "WARNING"
        config.accesslog = None
        asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main(sys.argv[1:])
