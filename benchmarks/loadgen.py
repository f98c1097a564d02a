"""Drive an HTTP server on loopback: wrk when installed, else a small Python
client (keep-alive HTTP/1.1 over raw sockets, so it costs little CPU of its own).

Flat out (each connection sends its next request when the last is answered)
or paced: ``rate`` requests a second in all, each connection sending on a
fixed schedule and each latency counted from the moment its request was
due, so a server that falls behind is charged for the wait (a fixed arrival
rate, as a storm of new visitors is: they do not wait for each other). The
Python client can run in ``generators`` processes, so that on a machine with
more cores the server, not the client, is what saturates; each result says
how busy the generators were (their CPU time over the run's, the busiest
one's), so a run whose generator was the limit can be told apart.

Both are bounded in time and send only to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import re
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Browser", "Result", "run_load"]


@dataclass(frozen=True)
class Result:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int
    # The busiest generator's CPU time over the run's (1.0: a core's worth,
    # the generator was the limit); NaN where it is not known.
    generator_busy: float = math.nan
    generators: int = 1
    offered_rps: float | None = None  # the paced rate asked for; None: flat out


# Each request from another client address, as a proxy in front of the app
# would say (X-Forwarded-For): new visitors of a real sale come from many
# addresses, and the gate counts new places per address.
# Each of wrk's threads (up to 64) numbers its requests apart: thread t
# sends t + 1, t + 1 + 64, ...
_CLIENTS_LUA = """
local threads = 0
setup = function(thread)
  thread:set("id", threads)
  threads = threads + 1
end
local n = 0
request = function()
  local m = n * 64 + (id or 0) + 1
  n = n + 1
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d",
    math.floor(m / 65536) % 256, math.floor(m / 256) % 256, m % 256)
  return wrk.format()
end
"""


def client_address(n: int) -> str:
    return f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


class Browser:
    """One visitor's HTTP/1.1 client for loopback benchmarks: one keep-alive
    connection (opened again when the server has closed it) and its cookies,
    as a browser tab has, at a small share of httpx's CPU (about a
    millisecond a request in httpx, with its cookie jar, URL model and
    connection pool: a thousand waiting visitors polling from one process
    saturated its core, and its stalls reached the server as bursts). GET
    only; bodies with a Content-Length or chunked."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, path: str, accept: str = "*/*") -> tuple[int, bytes]:
        """(status, body); OSError when the server cannot be reached or
        answers nonsense. A connection the server closed while idle is
        opened again once (a GET can be sent again)."""
        for attempt in (1, 2):
            fresh = self._stream is None
            if self._stream is None:
                self._stream = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = self._stream
            cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n"
            if cookie:
                head += f"Cookie: {cookie}\r\n"
            try:
                writer.write(head.encode() + b"\r\n")
                return await self._response(reader)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                if fresh or attempt == 2:
                    raise OSError(f"no answer from 127.0.0.1:{self.port}{path}") from exc
        raise AssertionError("unreachable")

    async def _response(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, chunked, close = 0, False, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                close = value.lower() == "close"
            elif name == "set-cookie":
                pair, _, attributes = value.partition(";")
                key, _, cookie_value = pair.partition("=")
                if "max-age=0" in attributes.lower().replace(" ", ""):
                    self.cookies.pop(key.strip(), None)
                else:
                    self.cookies[key.strip()] = cookie_value.strip()
        if chunked:
            body = b""
            while size := int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16):
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        else:
            body = await reader.readexactly(length)
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
            self._stream = None


def run_load(
    port: int,
    path: str,
    seconds: float,
    connections: int,
    headers: dict[str, str],
    many_clients: bool = False,
    *,
    generators: int = 1,
    rate: float | None = None,
) -> Result:
    """Load ``path`` for ``seconds`` from ``connections`` connections; with
    ``many_clients``, every request carries another X-Forwarded-For
    address. ``rate``: that many requests a second in all, on a schedule
    (the Python client; wrk cannot pace), else flat out. ``generators``:
    processes (wrk's threads, or the Python client's processes), the
    connections shared among them."""
    generators = max(1, min(generators, connections, 64))
    if rate is None and shutil.which("wrk"):
        return _wrk(port, path, seconds, connections, headers, many_clients, generators)
    plan = _Plan(port, path, seconds, connections, headers, many_clients, generators, rate)
    if generators == 1:
        return _result([_generate(plan, 0)], elapsed=None, plan=plan)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    go = context.Event()
    processes = [context.Process(target=_child, args=(plan, i, queue, go)) for i in range(generators)]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            queue.get(timeout=60)  # each one's "ready", once its interpreter is up
        go.set()
        started = time.monotonic()
        runs = [queue.get(timeout=seconds + 60) for _ in processes]
        elapsed = time.monotonic() - started
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    return _result(runs, elapsed, plan)


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise ValueError(f"cannot read wrk's latency {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def _wrk(
    port: int,
    path: str,
    seconds: float,
    connections: int,
    headers: dict[str, str],
    many_clients: bool,
    threads: int,
) -> Result:
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        if many_clients:
            script.write(_CLIENTS_LUA)
            script.flush()
            command += ["-s", script.name]
        cpu = _children_cpu()
        out = subprocess.run(
            [*command, f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=seconds + 30
        ).stdout
        # wrk's threads together, over the run: a share of one core each.
        busy = (_children_cpu() - cpu) / max(1, round(seconds)) / threads
    if "Requests/sec" not in out:
        raise RuntimeError(f"wrk failed: {out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    # The percentiles' own lines (the stats above also end in "...99.50%").
    p50 = _ms(re.search(r"(?m)^\s+50%\s+(\S+)", out)[1])  # type: ignore[index]
    p99 = _ms(re.search(r"(?m)^\s+99%\s+(\S+)", out)[1])  # type: ignore[index]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = sum(int(n) for n in socket_errors.groups()) if socket_errors else 0
    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    failures = failed + (int(errors[1]) if errors and path == "/page" else 0)
    return Result(rps, p50, p99, failures, total, round(busy, 3), threads)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class _Plan:
    port: int
    path: str
    seconds: float
    connections: int
    headers: dict[str, str]
    many_clients: bool
    generators: int
    rate: float | None


@dataclass(frozen=True)
class _Run:
    latencies: list[float]  # seconds
    errors: int
    cpu: float  # the generator's CPU seconds during the run
    elapsed: float


def _child(plan: _Plan, index: int, queue: Any, go: Any) -> None:
    queue.put("ready")
    go.wait()
    queue.put(_generate(plan, index))


def _generate(plan: _Plan, index: int) -> _Run:
    """Generator ``index``'s share of the plan: its connections (every
    ``generators``-th of them) and their requests, in this process."""
    mine = range(index, plan.connections, plan.generators)
    cpu = time.process_time()
    latencies, errors, elapsed = asyncio.run(_python(plan, mine))
    return _Run(latencies, errors, time.process_time() - cpu, elapsed)


def _result(runs: list[_Run], elapsed: float | None, plan: _Plan) -> Result:
    latencies = sorted(latency for run in runs for latency in run.latencies)
    errors = sum(run.errors for run in runs)
    busy = max(run.cpu / run.elapsed if run.elapsed > 0 else math.nan for run in runs)
    elapsed = max(run.elapsed for run in runs) if elapsed is None else elapsed
    if not latencies:
        return Result(0.0, 0.0, 0.0, errors, 0, busy, plan.generators, plan.rate)
    return Result(
        len(latencies) / elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        errors,
        len(latencies),
        round(busy, 3),
        plan.generators,
        plan.rate,
    )


async def _python(plan: _Plan, mine: range) -> tuple[list[float], int, float]:
    """Latencies (s), errors and elapsed time of connections ``mine``."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in plan.headers.items())
    request = f"GET {plan.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()
    latencies: list[float] = []
    errors = 0
    # Each connection's requests are numbered apart from every other's (one
    # client address each, across the generators: n = connection + k x all).
    step = plan.connections
    started = time.perf_counter()
    deadline = started + plan.seconds
    # Paced: each connection's share of the rate, its first request offset
    # so that the connections' schedules interleave.
    interval = None if plan.rate is None else plan.connections / plan.rate

    async def worker(connection: int) -> None:
        nonlocal errors
        n = connection + 1
        due = started if interval is None else started + interval * connection / plan.connections
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", plan.port)
        except OSError:
            errors += 1
            return
        try:
            while True:
                now = time.perf_counter()
                if interval is not None:
                    if due > now:
                        await asyncio.sleep(due - now)
                    start = due  # late requests count their wait
                    due += interval
                else:
                    start = now
                if start >= deadline:
                    break
                if plan.many_clients:
                    forwarded = b"X-Forwarded-For: %s\r\n\r\n" % client_address(n).encode()
                    writer.write(request[:-2] + forwarded)
                else:
                    writer.write(request)
                n += step
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: (\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - start)
        except (OSError, asyncio.IncompleteReadError):
            errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker(connection) for connection in mine))
    return latencies, errors, time.perf_counter() - started
