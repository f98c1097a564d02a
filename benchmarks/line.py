"""The line's promises in one run: ``python -m benchmarks.reopen`` (the
console's pause and open against three workers: never more than N an
interval, the first admission after ``open``) and ``python -m
benchmarks.streams`` (15,000 streams held open on one worker: memory beside
a bare Starlette stream, Redis's commands a second at 1k, 5k and 15k, the
turn's latency, ``unavailable`` events), one after the other, each with its
own Redis and workers.

    python -m benchmarks.line [--streams 15000] [--json]
"""

from __future__ import annotations

import argparse
from typing import Any

from . import reopen, streams
from .report import print_report


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.line", description=description)
    parser.add_argument("--streams", type=int, default=15_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    met: dict[str, bool] = {}
    for name, module, measured in (
        ("reopen", reopen, reopen.measure()),
        ("streams", streams, streams.measure(args.streams)),
    ):
        report.update({f"{name}.{key}": value for key, value in measured.items()})
        met.update(module.targets(measured))
    report["targets_met"] = all(met.values())
    print_report(report, args.json)
    if not args.json:
        for target, ok in met.items():
            print(f"target  {target}: {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
