"""Serve one of the shop apps with a real server, for the raw-socket tests:

    python -m tests.servers.serve SERVER ROUTER MODE PORT REDIS_URL PREFIX [ROOT_PATH]

SERVER is uvicorn-h11, uvicorn-httptools or hypercorn.
"""

from __future__ import annotations

import asyncio
import sys

from .apps import build


def main(argv: list[str]) -> None:
    server, router, mode, port, redis_url, prefix, *rest = argv
    root_path = rest[0] if rest else ""
    app = build(router, mode, redis_url, prefix)
    if server.startswith("uvicorn"):
        import uvicorn

        http = "h11" if server == "uvicorn-h11" else "httptools"
        uvicorn.run(
            app, host="127.0.0.1", port=int(port), http=http, root_path=root_path, log_level="warning"
        )
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
