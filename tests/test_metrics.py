"""Prometheus text for every room."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queuegate import Room
from queuegate.metrics import metrics_app

from .conftest import MakeGate, client_for

pytestmark = pytest.mark.anyio


async def test_metrics_for_every_room(make_gate: MakeGate) -> None:
    rooms = [Room("sale", paths=["/checkout*"], rate=1, per=60), Room("t-{e}", paths=["/t/{e}"], capacity=9)]
    gate = await make_gate(rooms=rooms)
    async with client_for(gate) as a, client_for(gate) as b:
        await a.get("/checkout")
        await b.get("/checkout")
        await a.get("/t/7")
    async with client_for(metrics_app(gate.store)) as scraper:
        response = await scraper.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, sample.labels["room"]): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    assert samples[("queuegate_waiting", "sale")] == 1
    assert samples[("queuegate_active", "sale")] == 1
    assert samples[("queuegate_active", "t-7")] == 1
    assert samples[("queuegate_admitted_total", "sale")] == 1
    assert samples[("queuegate_capacity", "t-7")] == 9
    assert samples[("queuegate_open", "sale")] == 1


async def test_metrics_when_redis_is_down(make_gate: MakeGate) -> None:
    gate = await make_gate(rooms=[Room("sale", paths=["/c"], rate=1)], redis="redis://127.0.0.1:1/0")
    async with client_for(metrics_app(gate.store)) as scraper:
        response = await scraper.get("/")
    assert response.status_code == 503
