"""Run the demo shop: ``python -m demo_app [--host 127.0.0.1] [--port 8000]``.

Uses ``QUEUEGATE_REDIS_URL`` when set, else starts a private embedded server
that stops with the demo.
"""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn

from queuegate.embedded import EmbeddedServer, EmbeddedServerError
from queuegate.store import redacted

from .shop import PER, RATE, create_app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)

    url = os.environ.get("QUEUEGATE_REDIS_URL")
    server = None
    if url:
        where = f"{redacted(url)} (QUEUEGATE_REDIS_URL)"
    else:
        try:
            server = EmbeddedServer().start()
        except EmbeddedServerError as exc:
            print(f"queuegate demo: {exc}", file=sys.stderr)
            return 1
        url = server.url
        where = f"embedded {server.version().split(' sha=')[0]} on {url} (stops with the demo)"
    try:
        shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        print(f"queuegate demo shop:  http://{shown}:{args.port}/", flush=True)
        print(f"gated checkout:       http://{shown}:{args.port}/checkout  ({RATE} per {PER:g} s)")
        print(f"line kept in:         {where}", flush=True)
        print("Open the checkout in a few browser windows to see the line. Ctrl-C stops.", flush=True)
        uvicorn.run(create_app(url), host=args.host, port=args.port, log_level="warning")
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
