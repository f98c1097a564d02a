"""Run the demo shop: ``python -m demo_app [--host 127.0.0.1] [--port 8000]``.

Uses ``QUEUEGATE_REDIS_URL`` when set, else starts a private embedded server
that stops with the demo. Prints the shop's URL, the back office's URL with
its token, and which Redis it uses.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import secrets
import socket
import sys

import uvicorn

from queuegate.embedded import EmbeddedServer, EmbeddedServerError
from queuegate.store import redacted

from .shop import PER, RATE, SALE_MINUTES, create_app


def _minutes(text: str) -> float:
    """A positive, finite number of minutes (``inf``, ``nan`` or ``-5``
    made a landing page that answered 500, or a sale over before it began)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of minutes, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of minutes, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo_app", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--rate", type=int, default=RATE, help=f"checkout admissions per interval ({RATE})")
    parser.add_argument("--per", type=float, default=PER, help=f"the interval, seconds ({PER:g})")
    parser.add_argument(
        "--challenge",
        type=int,
        default=0,
        help="a proof of work before each checkout place: the largest number to try (0: none; try 100000)",
    )
    parser.add_argument(
        "--target-ms",
        type=int,
        default=0,
        help="let the checkout's rate follow its health: the p95 to keep it under, ms (0: a fixed rate)",
    )
    parser.add_argument(
        "--sale-minutes",
        type=_minutes,
        default=SALE_MINUTES,
        help=f"how long the sale lasts, minutes ({SALE_MINUTES:g}): then the checkout says it has ended",
    )
    parser.add_argument(
        "--admin-token",
        default=os.environ.get("QUEUEGATE_DEMO_ADMIN_TOKEN"),
        help="the back office's token (default: $QUEUEGATE_DEMO_ADMIN_TOKEN, else a random one)",
    )
    args = parser.parse_args(argv)
    busy = _port_taken(args.host, args.port)
    if busy:
        print(
            f"queuegate demo: cannot listen on {args.host}:{args.port} ({busy}); "
            f"another program (another demo?) has it. Try --port {args.port + 1}.",
            file=sys.stderr,
        )
        return 1

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
    token = args.admin_token or secrets.token_urlsafe(16)
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    base = f"http://{shown}:{args.port}"
    try:
        print(f"queuegate demo shop:  {base}/", flush=True)
        pace = (
            f"following its health: p95 under {args.target_ms} ms"
            if args.target_ms
            else "fixed; --target-ms 300 lets it follow the checkout's health"
        )
        print(f"gated checkout:       {base}/checkout  ({args.rate} per {args.per:g} s, {pace})", flush=True)
        print(f"line kept in:         {where}", flush=True)
        if server is not None:
            # The console finds the line where the shop does: this server.
            print(f"console:              export QUEUEGATE_REDIS_URL={url}", flush=True)
        print(f"back office:          {base}/admin-login?token={token}", flush=True)
        print(
            "A browser is one visitor: open the checkout in a window, a private window and another browser. "
            "Ctrl-C stops.",
            flush=True,
        )
        app = create_app(
            url,
            rate=args.rate,
            per=args.per,
            challenge=args.challenge,
            target_ms=args.target_ms,
            admin_token=token,
            base_url=base,
            sale_minutes=args.sale_minutes,
        )
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        if server is not None:
            server.close()
    return 0


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None when it can: checked
    before anything is printed or started (uvicorn would print nothing
    useful and exit after the demo's URLs pointed at the other program)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            return "in use" if exc.errno == errno.EADDRINUSE else str(exc.strerror or exc)
    return None


if __name__ == "__main__":
    raise SystemExit(main())
