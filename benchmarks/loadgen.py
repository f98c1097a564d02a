"""Drive an HTTP server on loopback: wrk when installed, else a small Python
client (keep-alive HTTP/1.1 over raw sockets, so it costs little CPU of its own).

Both are bounded in time and send only to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

__all__ = ["Result", "run_load"]


@dataclass(frozen=True)
class Result:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int


def run_load(port: int, path: str, seconds: float, connections: int, headers: dict[str, str]) -> Result:
    if shutil.which("wrk"):
        return _wrk(port, path, seconds, connections, headers)
    return asyncio.run(_python(port, path, seconds, connections, headers))


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise ValueError(f"cannot read wrk's latency {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def _wrk(port: int, path: str, seconds: float, connections: int, headers: dict[str, str]) -> Result:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run(
        [*command, f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=seconds + 30
    ).stdout
    if "Requests/sec" not in out:
        raise RuntimeError(f"wrk failed: {out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    # The percentiles' own lines (the stats above also end in "...99.50%").
    p50 = _ms(re.search(r"(?m)^\s+50%\s+(\S+)", out)[1])  # type: ignore[index]
    p99 = _ms(re.search(r"(?m)^\s+99%\s+(\S+)", out)[1])  # type: ignore[index]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = sum(int(n) for n in socket_errors.groups()) if socket_errors else 0
    return Result(rps, p50, p99, failed + (int(errors[1]) if errors and path == "/page" else 0))


async def _python(port: int, path: str, seconds: float, connections: int, headers: dict[str, str]) -> Result:
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - start)
        except (OSError, asyncio.IncompleteReadError):
            errors += 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed = time.monotonic() - started
    latencies.sort()
    if not latencies:
        return Result(0.0, 0.0, 0.0, errors)
    return Result(
        len(latencies) / elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        errors,
    )
