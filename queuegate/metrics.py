"""Live numbers of every room as Prometheus text, on an endpoint you mount.

    from queuegate.metrics import metrics_app
    app.mount("/metrics", metrics_app(gate.store, gate=gate))   # needs queuegate[prometheus]

Each scrape runs the stats script once per room (every room with state in
Redis, template rooms included), so the figures are current, and reads the
room's wait analytics (``queuegate.analytics``), many rooms at a time
(``queuegate.readings.each_room``, as the console's views): the histogram
``queuegate_wait_seconds{room, outcome="admitted"|"gave_up"}`` and the gauge
``queuegate_estimate_accurate_ratio``.

With ``gate=`` (optional: ``metrics_app(store)`` serves the rooms alone) it
adds what that gate counted in its own process, as a scrape of each process
shows: ``queuegate_foreign_cookies_total``, and the requests it answered
without Redis (``queuegate_redis_failed_closed_total``,
``queuegate_redis_failed_open_total``, ``queuegate_outage_passed_total``),
refused for their cookie (``queuegate_cookies_refused_total``) or let past
by a bypass rule (``queuegate_bypassed_total``).

If Redis fails, a scrape without ``gate=`` has nothing to say: it answers
503, which Prometheus records as a failed scrape (``up`` 0). With one, the
process's own counts need no Redis, and a 503 would lose them (Prometheus
reads nothing of a failed scrape): it answers them, without the rooms, with
``queuegate_redis_up`` 0 (1 when the rooms were read).

Rooms named in ``rooms=`` are checked twice. A name that cannot be a
room's (not 1-100 letters, digits, '-' or '_'; or one string given for
the list, whose letters would be taken for names) is refused when the
app is made (``ConfigError``). A name Redis has no room for (misspelt,
not used yet, or forgotten) can only be told at a scrape: the room is
exported as ``queuegate_room_found{room="..."} 0`` (1 for every room
read), and a warning is logged, by ``metrics_app`` once until the room
is found again, by ``metrics_text`` at each call. Nothing else about it
is exported, and the other rooms are, so one bad name never costs the
scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from .checks import ConfigError
from .readings import each_room
from .settings import ROOM_NAME, Room
from .store import Store, StoreError

if TYPE_CHECKING:
    from .gate import QueueGate

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "queuegate.metrics needs prometheus-client: install queuegate's `prometheus` extra "
        "(`pip install -e '<the queuegate clone>[prometheus]'`, or its wheel with [prometheus]; "
        "queuegate is not on PyPI)"
    ) from exc

__all__ = ["metrics_app", "metrics_text"]

logger = logging.getLogger("queuegate")

GAUGES = {
    "waiting": "Visitors waiting in line",
    "active": "Active (admitted, unexpired) sessions",
    "per_minute": "Admissions per minute, measured",
    "ended_per_minute": "Sessions ending per minute, measured",
    "eta_back_seconds": "Estimated wait at the back of the line (-1: unknown)",
    "rate": "Visitors admitted per interval (0: no rate limit)",
    "per_seconds": "Admission interval",
    "capacity": "Most active sessions (0: no limit)",
    # The admission controller (rooms with a health target; see Health).
    "target_seconds": "Health target: p95 of forwarded responses (0: no controller)",
    "p95_seconds": "Measured p95 of forwarded responses, to their end (-1: none yet)",
    "first_byte_p95_seconds": "Measured p95 of forwarded responses, to their first byte (-1: none yet)",
    "error_rate": "Measured share of forwarded responses that failed (5xx, exceptions)",
    "pinned": "1 when the operator pinned the rate or capacity",
    "target_out_of_reach_p95_seconds": "p95 at minimal load while no rate meets the target (-1: none)",
    "rate_changed_timestamp_seconds": "When the controller last changed the rate or capacity (0: never)",
}
COUNTERS = {
    "admitted": "Visitors admitted",
    "joined": "Visitors who joined the line",
    "abandoned": "Waiting visitors skipped because they stopped polling",
    "expired": "Sessions that ran out",
    "released": "Sessions released by the app",
    "left": "Visitors who left",
    "drained": "Waiting visitors taken out of the line by a drain",
    "limited": "New places refused by the room's client_limit (answered 429)",
}
# What a gate counted in its own process (with gate=), by gate.counters' key.
PROCESS_COUNTERS = {
    "failed_closed": (
        "redis_failed_closed",
        "Gated requests and status polls of rooms that fail closed that Redis did not answer in time for,"
        " in this process: each answered 503, but for visitors admitted before (queuegate_outage_passed)",
    ),
    "failed_open": (
        "redis_failed_open",
        "Gated requests and status polls of rooms that fail open that Redis did not answer in time for,"
        " in this process: requests forwarded ungated, status polls answered 503",
    ),
    "outage_passed": (
        "outage_passed",
        "Requests of visitors admitted before, let through by this process while Redis did not answer",
    ),
    "refused": ("cookies_refused", "Requests this process refused (403) for a cookie it would not honour"),
    "bypassed": ("bypassed", "Requests this process let past the gate by a bypass rule"),
}
REDIS_UP = (
    "1 when this scrape read the rooms from Redis; 0: Redis failed, and only this process's own counts"
    " are given"
)
ROOM_FOUND = (
    "1 when the room was read from Redis; 0: a room named to the exporter that Redis has no state"
    " for (misspelt, not used yet, or forgotten), and nothing else of it is given"
)
FOREIGN_COOKIES = (
    "Cookies signed, but with none of this process's secret keys, counted by this process since it"
    " started: usually processes with different secret_key, which send a visitor to the back of the"
    " line at each move between them"
)


class _Snapshot:
    """A one-shot collector over stats already fetched."""

    def __init__(
        self,
        rooms: dict[str, dict[str, Any]] | None,
        analytics: dict[str, dict[str, Any]],
        missing: list[str],
        foreign: int | None,
        counters: dict[str, int] | None = None,
    ) -> None:
        self.rooms = rooms  # None: Redis failed
        self.analytics = analytics
        self.missing = missing  # named, but not in Redis
        self.foreign = foreign
        self.counters = counters or {}  # the gate's own (gate.counters)

    def collect(self) -> Iterator[Metric]:
        if self.rooms is not None:
            yield from self._rooms(self.rooms)
        yield GaugeMetricFamily("queuegate_redis_up", REDIS_UP, value=0.0 if self.rooms is None else 1.0)
        if self.foreign is not None:
            yield CounterMetricFamily("queuegate_foreign_cookies", FOREIGN_COOKIES, value=float(self.foreign))
        for key, (name, text) in PROCESS_COUNTERS.items():
            if key in self.counters:
                yield CounterMetricFamily(f"queuegate_{name}", text, value=float(self.counters[key]))

    def _rooms(self, rooms: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        for name, text in GAUGES.items():
            gauge = GaugeMetricFamily(f"queuegate_{name}", text, labels=["room"])
            for room, stats in rooms.items():
                gauge.add_metric([room], _value(stats, name))
            yield gauge
        for name, text in COUNTERS.items():
            counter = CounterMetricFamily(f"queuegate_{name}", text, labels=["room"])
            for room, stats in rooms.items():
                counter.add_metric([room], float(stats[name]))
            yield counter
        found = GaugeMetricFamily("queuegate_room_found", ROOM_FOUND, labels=["room"])
        for room in rooms:
            found.add_metric([room], 1.0)
        for room in self.missing:
            found.add_metric([room], 0.0)
        yield found
        state = GaugeMetricFamily("queuegate_open", "1 when the room admits as configured", labels=["room"])
        for room, stats in rooms.items():
            state.add_metric([room], 1.0 if stats["status"] == "open" else 0.0)
        yield state
        waits = HistogramMetricFamily(
            "queuegate_wait_seconds",
            "How long visitors waited: until admitted, or until they left or went silent (gave_up)",
            labels=["room", "outcome"],
        )
        accurate = GaugeMetricFamily(
            "queuegate_estimate_accurate_ratio",
            "Share of those admitted from the line whose estimate at joining was within 20 % of their wait"
            " (-1: none yet)",
            labels=["room"],
        )
        for room, figures in self.analytics.items():
            for outcome, histogram in figures["waits"].items():
                cumulative, buckets = 0, []
                for bound, n in zip([*histogram["bounds_ms"], None], histogram["counts"], strict=True):
                    cumulative += n
                    buckets.append(("+Inf" if bound is None else str(bound / 1000), float(cumulative)))
                waits.add_metric([room, outcome], buckets, histogram["sum_ms"] / 1000)
            share = figures["estimate"]["share"]
            accurate.add_metric([room], -1.0 if share is None else float(share))
        yield waits
        yield accurate


def _value(stats: dict[str, Any], name: str) -> float:
    if name == "eta_back_seconds":
        return -1.0 if stats["eta_back_ms"] < 0 else stats["eta_back_ms"] / 1000
    if name == "per_seconds":
        return float(stats["per"]) / 1000
    if name == "target_out_of_reach_p95_seconds":
        ms = stats["out_of_reach_ms"]
        return -1.0 if ms < 0 else ms / 1000
    if name in ("target_seconds", "p95_seconds", "first_byte_p95_seconds"):
        ms = float(stats[name.removesuffix("_seconds") + "_ms"])
        return -1.0 if ms < 0 else ms / 1000
    if name == "rate_changed_timestamp_seconds":
        return float(stats["health_changed_at"]) / 1000
    return float(stats[name])


async def metrics_text(
    store: Store, rooms: Iterable[str] | None = None, *, gate: QueueGate | None = None
) -> bytes:
    """The scrape's text. If Redis fails: StoreError without ``gate``; with
    one, its process's own counts and ``queuegate_redis_up`` 0, the failure
    in a comment. A name in ``rooms`` that cannot be a room's: ConfigError;
    one Redis has no room for: ``queuegate_room_found`` 0, and a warning."""
    return await _scrape(store, _named(rooms), gate, set())


def _named(rooms: Iterable[str] | None) -> list[str] | None:
    """The rooms named to the exporter, once (an iterator would be empty at
    the second scrape), each a name a room can have."""
    if rooms is None:
        return None
    if isinstance(rooms, str):
        raise ConfigError(f"rooms must be a list of room names, got the string {rooms!r}: rooms=[{rooms!r}]")
    try:
        given = list(rooms)
    except TypeError:
        raise ConfigError(f"rooms must be a list of room names, got {rooms!r}") from None
    for name in given:
        if isinstance(name, Room):
            raise ConfigError(f"rooms: give the rooms' names (Room.name), got the Room {name.name!r}")
        if not isinstance(name, str):
            raise ConfigError(f"rooms: {name!r} is not a room's name (a string)")
    names = list(dict.fromkeys(given))
    wrong = [name for name in names if not ROOM_NAME.fullmatch(name)]
    if wrong:
        said = ", ".join(map(repr, wrong))
        raise ConfigError(f"rooms: {said} cannot be a room's name (1-100 letters, digits, '-' or '_')")
    return names


async def _scrape(
    store: Store, names: Sequence[str] | None, gate: QueueGate | None, warned: set[str]
) -> bytes:
    """The scrape's text; a named room not found is warned of unless in
    ``warned`` (then added to it; a room found again leaves it)."""

    async def figures(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        return await store.stats(name), await store.analytics(name, minutes=0)

    snapshot: dict[str, dict[str, Any]] | None = None
    analytics: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    failure = b""
    try:
        listed = names if names is not None else await store.room_names()
        read = await each_room(listed, figures)  # a room not there is left out
        snapshot = {name: stats for name, (stats, _) in read.items()}
        analytics = {name: figures for name, (_, figures) in read.items()}
    except StoreError as exc:
        if gate is None:
            raise  # nothing else to say: a failed scrape
        failure = f"# redis unavailable: {_one_line(exc)}\n".encode()
    if snapshot is not None and names is not None:
        # Named, so expected: said, where a room gone since a scan is not.
        missing = [name for name in names if name not in snapshot]
        for name in missing:
            if name not in warned:
                logger.warning(
                    "queuegate: metrics: Redis has no room %r, named in rooms= (misspelt, not used yet, or "
                    "forgotten): exported as queuegate_room_found 0, and nothing else of it",
                    name,
                )
        warned.difference_update(snapshot)
        warned.update(missing)
    registry = CollectorRegistry(auto_describe=False)
    foreign = None if gate is None else gate.tokens.foreign
    counters = None if gate is None else dict(gate.counters)
    registry.register(_Snapshot(snapshot, analytics, missing, foreign, counters))
    return failure + bytes(generate_latest(registry))


def _one_line(exc: Exception) -> str:
    """A failure's text on one line: in a comment of the exposition, a line
    break would start a line Prometheus cannot parse, and lose the scrape."""
    return " ".join(str(exc).split())


class _MetricsApp:
    """The exporter as an ASGI app: an object, not a function, so that
    Starlette's ``Route("/metrics", metrics_app(store))`` serves it at that
    path as it is (a function there would be taken for a request handler,
    and ``Mount`` answers ``/metrics`` with a redirect to ``/metrics/``)."""

    def __init__(self, store: Store, names: list[str] | None, gate: QueueGate | None) -> None:
        self._store = store
        self._names = names
        self._gate = gate
        self._warned: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        try:
            body = await _scrape(self._store, self._names, self._gate, self._warned)
            status, kind = 200, CONTENT_TYPE_LATEST
        except StoreError as exc:
            body, status, kind = f"redis unavailable: {_one_line(exc)}\n".encode(), 503, "text/plain"
        headers = [(b"content-type", kind.encode()), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def metrics_app(store: Store, rooms: Iterable[str] | None = None, *, gate: QueueGate | None = None) -> Any:
    """An ASGI app answering GET with the rooms' metrics; with ``gate``,
    that gate's process's own counts too. If Redis fails: 503, or with
    ``gate`` its own counts and ``queuegate_redis_up`` 0. A name in
    ``rooms`` that cannot be a room's is refused here (ConfigError); one
    Redis has no room for is warned of once, until it is found again.
    Serve it with ``Route("/metrics", metrics_app(store))`` (Starlette,
    FastAPI: ``app.add_route``) or ``app.mount``."""
    return _MetricsApp(store, _named(rooms), gate)
