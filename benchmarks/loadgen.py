"""Drive an HTTP server on loopback: wrk when installed, else a small Python
client (keep-alive HTTP/1.1 over raw sockets, so it costs little CPU of its own).

Both are bounded in time and send only to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

__all__ = ["Browser", "Result", "run_load"]


@dataclass(frozen=True)
class Result:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int


# Each request from another client address, as a proxy in front of the app
# would say (X-Forwarded-For): new visitors of a real sale come from many
# addresses, and the gate counts new places per address.
_CLIENTS_LUA = """
local n = 0
request = function()
  n = n + 1
  wrk.headers["X-Forwarded-For"] = string.format("10.%d.%d.%d",
    math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
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
) -> Result:
    """Load ``path`` for ``seconds``; with ``many_clients``, every request
    carries another X-Forwarded-For address."""
    if shutil.which("wrk"):
        return _wrk(port, path, seconds, connections, headers, many_clients)
    return asyncio.run(_python(port, path, seconds, connections, headers, many_clients))


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise ValueError(f"cannot read wrk's latency {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def _wrk(
    port: int, path: str, seconds: float, connections: int, headers: dict[str, str], many_clients: bool
) -> Result:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        if many_clients:
            script.write(_CLIENTS_LUA)
            script.flush()
            command += ["-s", script.name]
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
    total = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    return Result(rps, p50, p99, failed + (int(errors[1]) if errors and path == "/page" else 0), total)


async def _python(
    port: int, path: str, seconds: float, connections: int, headers: dict[str, str], many_clients: bool
) -> Result:
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode()
    sent = 0
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal errors, sent
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                sent += 1
                if many_clients:
                    forwarded = b"X-Forwarded-For: %s\r\n\r\n" % client_address(sent).encode()
                    writer.write(request[:-2] + forwarded)
                else:
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
        return Result(0.0, 0.0, 0.0, errors, 0)
    return Result(
        len(latencies) / elapsed,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
        errors,
        len(latencies),
    )
