"""Where a status poll's time goes in the server: its answer's shape, or the gate.

    python -m benchmarks.shape [--seconds 4] [--rounds 3] [--json]

A waiting visitor at the front of a short line is answered by the gate
itself, from its process's copy of the line's front: no Redis, no app. What
such a poll costs the server beyond the bare app's page is then the gate's
own work plus the answer's shape: seven headers and about 300 bytes of JSON,
against the bare page's two headers and two bytes. To tell the two apart,
four servers (uvicorn, 1 worker, uvloop, httptools, as ``python -m
benchmarks`` runs them) are loaded in turn by the same 32 connections:

- **bare page**: the speed benchmark's trivial Starlette app, its page;
- **raw page**: an ASGI callable that sends the bare page's response as it
  is, without Starlette;
- **raw poll answer**: one that sends the gate's answer to a waiting
  visitor's poll as it is (taken from the gated server first, headers and
  body), whatever it is asked;
- **gated poll**: the gate answering that visitor's polls.

The raw poll answer against the raw page is what the answer's shape costs
uvicorn and the kernel; the gated poll against the raw poll answer is the
gate's own work in the server, and the bare page against the raw page is
Starlette's. Figures are medians of the rounds; CPU is the server process's
(``/proc``) per request.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from queuegate.embedded import EmbeddedServer, server_binary

from .speed import Served, cookie, measured, uvicorn_server

RESPONSE_ENV = "QGDEV_BENCH_RESPONSE"  # the raw app's response: JSON, latin-1 texts
POLL = "/_queuegate/status/bench-wait"
# uvicorn adds these to every response itself: a raw app must not send them twice.
SERVER_HEADERS = {"date", "server"}


def _response() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    spec = json.loads(os.environ.get(RESPONSE_ENV) or '{"status": 200, "headers": [], "body": ""}')
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in spec["headers"]]
    return spec["status"], headers, spec["body"].encode("latin-1")


_STATUS, _HEADERS, _BODY = _response()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The raw app: the same response to every request."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": _STATUS, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})


def _as_spec(response: httpx.Response) -> str:
    """A response as the raw app's setting: its status, headers (less those
    uvicorn adds itself) and body."""
    headers = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in response.headers.raw
        if name.decode("latin-1").lower() not in SERVER_HEADERS
    ]
    return json.dumps(
        {"status": response.status_code, "headers": headers, "body": response.content.decode("latin-1")}
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shape", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = parser.parse_args(argv)
    with EmbeddedServer(server_binary("path")) as server:
        url = server.url
        with uvicorn_server("bare", url) as bare, uvicorn_server("gated", url) as gated:
            waiting = {"Cookie": cookie(gated.port, "/wait", "bench-wait", 2)}
            poll = httpx.get(f"http://127.0.0.1:{gated.port}{POLL}", headers=waiting)
            assert poll.json()["state"] == "waiting", poll.text
            page = httpx.get(f"http://127.0.0.1:{bare.port}/page")
            raw = "benchmarks.shape:app"
            with (
                uvicorn_server("raw", url, app=raw, env={RESPONSE_ENV: _as_spec(page)}) as raw_page,
                uvicorn_server("raw", url, app=raw, env={RESPONSE_ENV: _as_spec(poll)}) as raw_poll,
            ):
                servers: dict[str, tuple[Served, str, dict[str, str]]] = {
                    "bare page": (bare, "/page", {}),
                    "raw page": (raw_page, "/page", {}),
                    "raw poll answer": (raw_poll, POLL, waiting),
                    "gated poll": (gated, POLL, waiting),
                }
                runs: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
                for _ in range(args.rounds):
                    for name, (served, path, headers) in servers.items():
                        run = measured(served, url, path, args.seconds, args.connections, headers)
                        runs[name].append((run.load.requests_per_second, run.app_cpu_us))
    med = statistics.median
    report: dict[str, Any] = {
        name: {"rps": round(med(r for r, _ in done)), "app_cpu_us": round(med(c for _, c in done), 1)}
        for name, done in runs.items()
    }
    cpu = {name: figures["app_cpu_us"] for name, figures in report.items()}
    report["answer_shape_us"] = round(cpu["raw poll answer"] - cpu["raw page"], 1)
    report["gate_us"] = round(cpu["gated poll"] - cpu["raw poll answer"], 1)
    report["starlette_us"] = round(cpu["bare page"] - cpu["raw page"], 1)
    report["poll_headers"] = len(json.loads(_as_spec(poll))["headers"])
    report["poll_body_bytes"] = len(poll.content)
    if args.json:
        print(json.dumps(report))
        return 0
    bare_rps = report["bare page"]["rps"]
    print(f"{'server':<16} {'req/s':>8} {'vs bare':>8} {'µs CPU':>7}")
    for name in servers:
        figures = report[name]
        print(f"{name:<16} {figures['rps']:>8} {figures['rps'] / bare_rps:>8.2f} {figures['app_cpu_us']:>7}")
    print(
        f"\nthe poll's answer ({report['poll_headers']} headers, {report['poll_body_bytes']} bytes) costs "
        f"{report['answer_shape_us']} µs more than the bare page's, as it is; the gate's own work "
        f"{report['gate_us']} µs; Starlette's, in the bare page, {report['starlette_us']} µs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
