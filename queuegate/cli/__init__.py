"""The operator's console: ``queuegate
list|show|activity|set|release|remove|drain|forget|seed|simulate|serve-admin``.

It talks to the same Redis as the app (``--redis`` or ``QUEUEGATE_REDIS_URL``)
and goes through the same scripts, so a change applies in every app process at
its next request. Errors are one line on stderr and a non-zero exit status,
with nothing changed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from ..console import show
from ..settings import ConfigError
from ..store import Store, StoreError, UnknownRoom, connect, redacted
from .commands import _run
from .parser import URL, CommandError, _parser
from .simulate import _simulate
from .watch import watch

__all__ = ["main"]


def _serve_admin(args: argparse.Namespace, url: str) -> int:
    secret = os.environ.get("QUEUEGATE_ADMIN_SECRET", "")
    if not secret:
        raise CommandError(
            "serve-admin: set QUEUEGATE_ADMIN_SECRET (12 characters or more) for its sign-in", 2
        )
    if len(secret) < 12:
        raise CommandError(
            f"serve-admin: QUEUEGATE_ADMIN_SECRET has {len(secret)} characters; its sign-in needs 12 or more",
            2,
        )
    try:
        import uvicorn
    except ImportError:
        raise CommandError(
            "serve-admin needs uvicorn: install queuegate's admin extra into this environment"
            ' (from a clone: pip install -e "PATH/TO/queuegate[admin]")',
            2,
        ) from None
    from .. import admin

    office = admin.app(
        Store(connect(url, args.timeout, setting=URL), args.prefix, args.timeout), secret=secret
    )
    print(f"queuegate back office: http://{args.host}:{args.port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(office, host=args.host, port=args.port, log_level="warning")
    return 0


# The commands that change a room (their output says where, on a terminal).
CHANGES = frozenset({"set", "release", "remove", "drain", "forget"})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "simulate":
        return _simulate(args)
    url = args.redis or os.environ.get("QUEUEGATE_REDIS_URL")
    try:
        if not url:
            raise CommandError("no Redis: pass --redis redis://host:6379/0 or set QUEUEGATE_REDIS_URL", 2)
        if args.command == "serve-admin":
            return _serve_admin(args, url)
        if getattr(args, "watch", None) is not None:
            return watch(args, url)
        output = asyncio.run(_run(args, url))
    except CommandError as exc:
        print(f"queuegate: {exc}", file=sys.stderr)
        return exc.status
    except ConfigError as exc:
        print(f"queuegate: {exc}", file=sys.stderr)
        return 2
    except UnknownRoom as exc:
        # The server too: a room in use looked for on another Redis is unknown.
        print(f"queuegate: {exc}, on Redis at {redacted(url or '?')}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"queuegate: cannot reach Redis at {redacted(url or '?')} ({exc})", file=sys.stderr)
        return 1
    try:
        if isinstance(output, str):
            print(output)
        else:
            show(output)
        if args.command in CHANGES and sys.stdout.isatty():
            # Which Redis was changed, for the operator at a terminal (a
            # staging console taken for production's); scripts read the
            # output as before.
            print(f"(on Redis at {redacted(url)}, key prefix {args.prefix!r})")
        sys.stdout.flush()
    except BrokenPipeError:
        # Piped into a reader that stopped early (`| head`): not an error of
        # ours; stdout is pointed at nothing so closing it cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
