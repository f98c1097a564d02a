"""Serving the benchmarks' apps: uvicorn on a free port (``uvicorn_server``),
a visitor's cookie, the processes' CPU per request (``measured``), and the
machine's speed at the moment (``evalsha_baseline_us``). Every served
benchmark (``benchmarks.speed``, ``benchmarks.turn``, ...) starts its
servers here.
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis

from queuegate.embedded import free_port

from .loadgen import Result, run_load

__all__ = [
    "ROOT",
    "Run",
    "Served",
    "cookie",
    "cpu_seconds",
    "evalsha_baseline_us",
    "measured",
    "most_files",
    "redis_cpu_seconds",
    "uvicorn_server",
]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Served:
    port: int
    pid: int


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far; NaN where /proc
    cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_seconds(url: str) -> float:
    with redis.Redis.from_url(url) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def evalsha_baseline_us(url: str, calls: int = 2000) -> float:
    """Redis's own time for an EVALSHA of a script that only returns (INFO
    commandstats): this machine's speed at this moment, to read the
    scripts' figures against (it moved from 0.55 to 8 us on this project's
    shared machines)."""
    with redis.Redis.from_url(url) as client:
        sha = client.script_load("return 1")
        client.config_resetstat()
        pipe = client.pipeline(transaction=False)
        for _ in range(calls):
            pipe.evalsha(sha, 0)
        pipe.execute()
        stats = client.info("commandstats")["cmdstat_evalsha"]
    return round(int(stats["usec"]) / int(stats["calls"]), 2)


@dataclass(frozen=True)
class Run:
    load: Result
    app_cpu_us: float  # the server process's CPU per request
    redis_cpu_us: float  # Redis's CPU per request


def measured(served: Served, redis_url: str, path: str, *load: Any, **pace: Any) -> Run:
    app, server = cpu_seconds(served.pid), redis_cpu_seconds(redis_url)
    result = run_load(served.port, path, *load, **pace)
    app, server = cpu_seconds(served.pid) - app, redis_cpu_seconds(redis_url) - server
    count = max(1, result.requests)
    return Run(result, app / count * 1e6, server / count * 1e6)


def most_files() -> None:
    """Raise this process's open-file limit to its hard limit (held
    streams and load generators hold thousands of sockets)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextmanager
def uvicorn_server(
    mode: str,
    redis_url: str,
    *,
    app: str = "benchmarks.app:app",
    env: dict[str, str] | None = None,
    workers: int = 1,
) -> Iterator[Served]:
    """uvicorn serving ``app`` (ready once ``/page`` answers); ``workers``
    processes (the pid is the first's, or the only worker's)."""
    port = free_port()
    env = {**os.environ, **(env or {}), "QGDEV_BENCH_MODE": mode, "QUEUEGATE_REDIS_URL": redis_url}
    command = [
        sys.executable, "-m", "uvicorn", app, "--port", str(port), "--loop", "uvloop",
        "--http", "httptools", "--log-level", "warning", "--no-access-log", "--backlog", "4096",
    ]  # fmt: skip
    if workers > 1:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, preexec_fn=most_files)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/page", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"uvicorn ({mode}) did not start") from None
                time.sleep(0.1)
        yield Served(port, process.pid)
    finally:
        process.terminate()
        process.wait(10)


def cookie(port: int, path: str, room: str, visits: int) -> str:
    """The room's cookie of the last of ``visits`` new visitors to ``path``."""
    value = ""
    for _ in range(visits):
        value = httpx.get(f"http://127.0.0.1:{port}{path}").cookies[f"qg_{room}"]
    return f"qg_{room}={value}"
