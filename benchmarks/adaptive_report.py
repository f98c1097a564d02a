"""The adaptive benchmark's figures (``benchmarks.adaptive``): what a run
records, each phase's goodput, p95 over the target and settling time, the
best of a sweep of fixed rates, and the report of every run against the
phases' oracles, as JSON or a table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TARGET_MS", "Record", "best_of", "p95_per_second", "phase_figures", "print_table", "reported"]

TARGET_MS = 600  # the adaptive room's health target, and the runs' judge


@dataclass
class Record:
    started: float
    started_wall: float
    requests: list[tuple[float, float]] = field(default_factory=list)  # (end, latency ms) since start
    served: list[tuple[float, float]] = field(default_factory=list)  # the same, measured in the server
    purchases: list[float] = field(default_factory=list)  # completion times since start
    rates: list[int] = field(default_factory=list)  # the room's rate, each second
    looks: list[str] = field(default_factory=list)  # the p95 and the controller's reason, each second


def p95_per_second(
    requests: list[tuple[float, float]], start: float, end: float, empty: float | None = 0.0
) -> list[float]:
    """Each second's p95 of the (end, ms) pairs that ended in it; a second
    without one counts as ``empty``, or is left out if that is None."""
    by_second: dict[int, list[float]] = {}
    for at, latency in requests:
        if start <= at < end:
            by_second.setdefault(int(at), []).append(latency)
    out = []
    for second in range(int(start), int(end)):
        values = sorted(by_second.get(second, []))
        if values:
            out.append(values[int(0.95 * (len(values) - 1))])
        elif empty is not None:
            out.append(empty)
    return out


def phase_figures(record: Record, index: int, phase_seconds: float, warm: float = 0.0) -> dict[str, float]:
    start, end = index * phase_seconds + warm, (index + 1) * phase_seconds
    p95s = p95_per_second(record.served, start, end)
    client_p95s = p95_per_second(record.requests, start, end)
    goodput = sum(start <= t < end for t in record.purchases) / (end - start)
    over = [p > TARGET_MS for p in p95s]
    rates = record.rates[int(index * phase_seconds) : int(end)]
    settle = 0.0
    if any(over):
        settle = (len(over) - over[::-1].index(True)) + warm
    if rates:
        final = statistics.median(rates[len(rates) // 2 :])
        off = [abs(r - final) > 0.2 * max(final, 1) for r in rates]
        if any(off):
            settle = max(settle, len(off) - off[::-1].index(True))
    return {
        "goodput_per_s": round(goodput, 2),
        "above_target_share": round(sum(over) / max(1, len(over)), 3),
        "settle_seconds": round(settle, 1),
        "p95_ms_median": round(statistics.median(p95s), 1) if p95s else 0.0,
        "client_p95_ms_median": round(statistics.median(client_p95s), 1) if client_p95s else 0.0,
        "rate_median": statistics.median(rates) if rates else 0,
        "rate_max": max(rates, default=0),
    }


def best_of(tried: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's best: highest goodput among the rates whose p95 was over
    the target at most 10 % of the time (among all, if none was)."""
    fine = [t for t in tried if t["above_target_share"] <= 0.10] or tried
    return {"best": max(fine, key=lambda t: t["goodput_per_s"]), "tried": tried}


def reported(
    phases: list[int],
    oracles: list[dict[str, Any]],
    inherited: list[dict[str, Any]],
    runs: dict[str, Record],
    seconds: float,
    delayed: bool,
) -> dict[str, Any]:
    """Each phase's row: its oracle (with ``inherited``, its oracle in the
    run's own context too) and each run's figures against it; then the
    adaptive room's, with its rate and its controller's looks each second."""
    report: dict[str, Any] = {
        "target_ms": TARGET_MS,
        "phase_seconds": seconds,
        "visit": "delayed" if delayed else "shop",
        "phases": [],
    }
    for index, slots in enumerate(phases):
        best = oracles[index]["best"]
        row: dict[str, Any] = {
            "slots": slots,
            "oracle_rate": best["rate"],
            "oracle_goodput_per_s": best["goodput_per_s"],
            "oracle_sweep": oracles[index]["tried"],
        }
        for name, record in runs.items():
            figures = phase_figures(record, index, seconds)
            figures["goodput_vs_oracle"] = round(
                figures["goodput_per_s"] / max(best["goodput_per_s"], 0.01), 3
            )
            figures["max_rate_vs_oracle"] = round(figures["rate_max"] / max(best["rate"], 1), 2)
            row[name] = figures
        if inherited:
            # The same runs against the best fixed rate with this phase's
            # inherited line: what an operator could have done from here.
            here = inherited[index]["best"]
            row["inherited_oracle_rate"] = here["rate"]
            row["inherited_oracle_goodput_per_s"] = here["goodput_per_s"]
            row["inherited_oracle_sweep"] = inherited[index]["tried"]
            for name in runs:
                row[name]["goodput_vs_inherited_oracle"] = round(
                    row[name]["goodput_per_s"] / max(here["goodput_per_s"], 0.01), 3
                )
        report["phases"].append(row)
    kept = (
        "goodput_vs_oracle",
        "goodput_vs_inherited_oracle",
        "above_target_share",
        "settle_seconds",
        "max_rate_vs_oracle",
    )
    report["adaptive"] = [
        {"slots": row["slots"], **{k: row["adaptive"][k] for k in kept if k in row["adaptive"]}}
        for row in report["phases"]
    ]
    report["adaptive_rates"] = runs["adaptive"].rates
    # Each second: the controller's p95, its responses and its last decision.
    report["adaptive_looks"] = runs["adaptive"].looks
    return report


def print_table(report: dict[str, Any], names: Sequence[str], inherited: bool) -> None:
    """The report as a table: a row per phase and run, then the adaptive
    room's rate each second."""
    heads = ("phase", "run", "goodput/s", "vs oracle", "p95>target", "settle s", "rate", "max/oracle")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (6, 15, 10, 10, 11, 9, 6, 11), strict=True)))
    for index, row in enumerate(report["phases"]):
        label = f"{index + 1} ({row['slots']})"
        oracle_goodput, oracle_rate = row["oracle_goodput_per_s"], row["oracle_rate"]
        blank = ""
        print(f"{label:>6} {'oracle':>15} {oracle_goodput:>10.2f} {'1.000':>10} {blank:>21} {oracle_rate:>6}")
        if "inherited_oracle_rate" in row:
            goodput, rate = row["inherited_oracle_goodput_per_s"], row["inherited_oracle_rate"]
            share = goodput / max(oracle_goodput, 0.01)
            print(f"{'':>6} {'oracle, in run':>15} {goodput:>10.2f} {share:>10.3f} {blank:>21} {rate:>6}")
        for name in names:
            f = row[name]
            in_run = f"  (vs oracle in run {f['goodput_vs_inherited_oracle']:.3f})" if inherited else ""
            print(
                f"{'':>6} {name:>15} {f['goodput_per_s']:>10.2f} {f['goodput_vs_oracle']:>10.3f} "
                f"{f['above_target_share']:>11.1%} {f['settle_seconds']:>9.1f} {f['rate_median']:>6} "
                f"{f['max_rate_vs_oracle']:>10.2f}x{in_run}"
            )
    print("adaptive rate, each second:", " ".join(map(str, report["adaptive_rates"])))
