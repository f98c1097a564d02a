"""The line's promises in one run: ``python -m benchmarks.reopen`` (the
console's pause and open against three workers: never more than N an
interval, the first admission after ``open``), ``python -m
benchmarks.streams`` (15,000 streams held open on one worker: memory beside
a bare Starlette stream, Redis's commands a second at 1k, 5k and 15k, the
turn's latency, ``unavailable`` events) and ``python -m benchmarks.leaving``
(a leaver's stream's end at ranks 1 to 10,000; a removed visitor's copies
dropped by three processes, also after ``FLUSHALL``), one after the other,
each with its own Redis and workers.

    python -m benchmarks.line [--streams 15000] [--only reopen,streams,leaving] [--json]

``--streams 0`` leaves the held streams out (the longest part); ``--only``
runs the parts named.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from . import leaving, reopen, streams
from .report import print_report

PARTS = ("reopen", "streams", "leaving")


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.line", description=description)
    parser.add_argument("--streams", type=int, default=15_000, help="held streams (0: that part left out)")
    parser.add_argument("--only", default=",".join(PARTS), help="the parts to run, by name, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    chosen = [name for name in args.only.split(",") if name]
    unknown = set(chosen) - set(PARTS)
    if unknown:
        parser.error(f"no part named {', '.join(sorted(unknown))} (the parts: {', '.join(PARTS)})")
    if args.streams <= 0 and "streams" in chosen:
        chosen.remove("streams")
    parts: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], dict[str, bool]]]] = {
        "reopen": (reopen.measure, reopen.targets),
        "streams": (lambda: streams.measure(args.streams), streams.targets),
        "leaving": (leaving.measure, leaving.targets),
    }
    report: dict[str, Any] = {}
    met: dict[str, bool] = {}
    for name in PARTS:
        if name not in chosen:
            continue
        measure, targets = parts[name]
        measured = measure()
        report.update({f"{name}.{key}": value for key, value in measured.items()})
        met.update(targets(measured))
    report["targets_met"] = all(met.values())
    report["parts_run"] = ",".join(name for name in PARTS if name in chosen)
    print_report(report, args.json)
    if not args.json:
        for target, ok in met.items():
            print(f"target  {target}: {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
