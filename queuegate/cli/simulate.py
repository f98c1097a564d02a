"""``queuegate simulate``: virtual visitors against a URL, with a progress bar on a terminal."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

from ..console import count, duration, show
from ..simulate import Progress, simulate
from .views import _grid


def _simulate(args: argparse.Namespace, stderr: Console | None = None) -> int:
    """Run ``simulate``; a progress bar on ``stderr`` (the process's) while
    it is a terminal and the summary is not JSON."""
    stderr = stderr or Console(stderr=True)
    terminal = not args.json and stderr.is_terminal
    progress = Progress(args.visitors)
    run = simulate(
        args.url,
        args.visitors,
        args.concurrency,
        give_up=args.give_up,
        patience=tuple(args.patience),
        max_seconds=args.max_seconds,
        seed=args.seed,
        progress=progress,
    )
    if terminal:
        asyncio.run(_with_bar(run, progress, stderr))
    else:
        asyncio.run(run)
    summary = progress.summary()
    warning = progress.warning()
    if warning:
        print(f"queuegate: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    else:
        show(_summary(progress, args.max_seconds))
    return 0 if progress.errors == 0 and not warning else 1


async def _with_bar(run: Awaitable[Progress], progress: Progress, console: Console) -> None:
    """The run with a progress bar on stderr, refreshed 4 times a second."""
    columns = (
        TextColumn("visitors"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
    )
    with Bar(*columns, console=console, transient=True) as bar:
        task = bar.add_task("simulate", total=progress.visitors, counts="")
        runner = asyncio.ensure_future(run)
        while not runner.done():
            bar.update(task, completed=progress.done, counts=progress.counts())
            await asyncio.wait([runner], timeout=0.25)
        await runner


def _summary(progress: Progress, max_seconds: float) -> RenderableType:
    summary = progress.summary()
    waits = ", ".join(
        f"{name} {duration(summary[key])}"
        for name, key in (("p50", "wait_p50_s"), ("p90", "wait_p90_s"), ("p99", "wait_p99_s"))
    )
    grid = _grid()
    grid.add_row("visitors", f"{progress.visitors:,}")
    grid.add_row("admitted", f"{progress.admitted:,}" + (f" (waits: {waits})" if progress.waits else ""))
    grid.add_row("gave up", f"{progress.gave_up:,} (their patience ran out)")
    if progress.still_waiting:
        grid.add_row(
            "still waiting", f"{progress.still_waiting:,} (when the run's {duration(max_seconds)} were up)"
        )
    else:
        grid.add_row("still waiting", "0")
    grid.add_row("not started", f"{progress.not_started:,}")
    if progress.ungated:
        grid.add_row("not gated", f"{progress.ungated:,} (let through with no queuegate cookie)")
    grid.add_row("errors", f"{progress.errors:,}")
    for reason, times in progress.reasons.most_common():
        grid.add_row("", f"{count(times, 'visitor')}: {reason}")
    if progress.limited:
        grid.add_row("limited", f"{count(progress.limited, 'answer')} 429 (client_limit), each waited out")
    if progress.unavailable:
        grid.add_row("unavailable", f"{count(progress.unavailable, 'answer')} (Redis away), each retried")
    return grid
