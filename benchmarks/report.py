"""How the small benchmarks print their figures: one JSON line, or a column
of names and values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def print_report(report: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(report))
        return
    width = max(map(len, report), default=0)
    for name, value in report.items():
        print(f"{name:>{width}}  {value}")
