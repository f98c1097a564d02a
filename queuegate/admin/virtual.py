"""The back office's virtual visitors (``visitors_url=``): a run of
simulated visitors against the site (``queuegate.simulate``), one at a
time, and its progress as the page shows it."""

from __future__ import annotations

import asyncio
from typing import Any

from ..checks import ConfigError
from ..simulate import Progress, simulate

__all__ = ["MAX_VIRTUAL_VISITORS", "VirtualVisitors"]

MAX_VIRTUAL_VISITORS = 5000


class VirtualVisitors:
    """One run at a time of virtual visitors against ``url`` (the site)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.progress: Progress | None = None
        self.task: asyncio.Task[Progress] | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self, options: dict[str, Any]) -> dict[str, Any]:
        """Start a run as ``options`` ask (checked: ConfigError); the
        details it runs with."""
        visitors = options.get("visitors", 200)
        path = options.get("path", "/")
        give_up = options.get("give_up", 0.3)
        leave = options.get("leave", True)
        if (
            isinstance(visitors, bool)
            or not isinstance(visitors, int)
            or not 1 <= visitors <= MAX_VIRTUAL_VISITORS
        ):
            raise ConfigError(f"visitors must be a whole number from 1 to {MAX_VIRTUAL_VISITORS}")
        if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
            raise ConfigError("path must be a path on the site, like /checkout")
        if isinstance(give_up, bool) or not isinstance(give_up, (int, float)) or not 0 <= give_up <= 1:
            raise ConfigError("give_up must be between 0 and 1")
        if not isinstance(leave, bool):
            raise ConfigError("leave must be true (they press Leave the line) or false (they close the tab)")
        self.progress = Progress(visitors)
        self.task = asyncio.create_task(
            simulate(
                self.url + path,
                visitors,
                concurrency=min(visitors, 200),
                give_up=give_up,
                progress=self.progress,
                leave=leave,
            )
        )
        return {"visitors": visitors, "path": path, "give_up": give_up, "leave": leave}

    def figures(self) -> dict[str, Any] | None:
        """The last run's progress for the page (``None``: none yet)."""
        if self.progress is None:
            return None
        progress = self.progress
        reasons = sorted(progress.reasons.items(), key=lambda pair: -pair[1])
        return {
            "running": self.running,
            "started": progress.started,
            "waiting": progress.waiting,
            # Every visitor is in one of these: not started yet (at most
            # `concurrency` run at once), asking for the page, waiting, done.
            "not_started": progress.visitors - progress.started,
            "arriving": progress.started - progress.waiting - progress.done,
            **progress.summary(),
            # After the summary, whose own error_reasons (a mapping) this
            # list for the page replaces.
            "error_reasons": [{"reason": reason, "count": count} for reason, count in reasons[:5]],
        }

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
