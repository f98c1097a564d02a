"""A Redis Cluster losing a master: the replica takes over and the gate
recovers by itself, within a bounded time. (The rest of the gate's tests run
on a cluster too: see SERVER_KINDS in test_gate.py, test_scripts.py, ...)"""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack

import pytest
import redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from queuegate import QueueGate, Room
from queuegate.pipeline import ClusterPipelines

from .conftest import EXTERNAL, SECRET, _until, client_for, ok_app, start_cluster

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(EXTERNAL is not None, reason="needs its own cluster, not QGDEV_TEST_REDIS_URL"),
]

RECOVERY_SECONDS = 15


async def test_rooms_spread_over_slots_and_survive_a_master_failover() -> None:
    with ExitStack() as stack:
        nodes = start_cluster(stack)
        rooms = [Room(f"event-{i}", paths=[f"/e{i}"], capacity=100, client_limit=0) for i in range(12)]
        gate = QueueGate(ok_app, rooms=rooms, secret_key=SECRET, environ={}, timeout=0.5,
                         redis=f"redis+cluster://127.0.0.1:{nodes[0].port}")  # fmt: skip
        try:
            assert isinstance(gate.store.calls.pipeline, ClusterPipelines)
            cluster = gate.store.client
            assert isinstance(cluster, RedisCluster)

            def owner(room: str) -> ClusterNode:
                node = cluster.get_node_from_key(f"qg:{{{room}}}:state")
                assert node is not None
                return node

            async with client_for(gate) as client:
                for i in range(12):
                    assert (await client.get(f"/e{i}")).status_code == 200
                # The rooms live on all three masters: no CROSSSLOT anywhere.
                assert len({owner(f"event-{i}").name for i in range(12)}) == 3
                # Kill the master of event-0's slot; its replica must take over.
                victim = owner("event-0")
                master = next(n for n in nodes if n.port == victim.port)
                master.kill()
                started = time.monotonic()
                while True:
                    passed = gate.counters["outage_passed"]
                    response = await client.get("/e0")
                    # Admitted before the failover: never thrown out during it.
                    assert response.status_code == 200
                    if gate.counters["outage_passed"] == passed:
                        break  # answered by the new master
                    assert time.monotonic() - started < RECOVERY_SECONDS, "no recovery after the failover"
                    await asyncio.sleep(0.1)
                assert gate.counters["outage_passed"] > 0
                recovered = time.monotonic() - started
                print(f"the gate recovered {recovered:.1f} s after the master was killed")
                # Same visitor, same session: the replica had the room's state.
                stats = await gate.rooms["event-0"].stats()
                assert stats["active"] == 1
                assert recovered < RECOVERY_SECONDS
        finally:
            await gate.store.aclose()
        # And the cluster itself settles back to a healthy state (gossip may lag the gate).
        survivors = [n for n in nodes if n.process is not None and n.process.poll() is None]
        with redis.Redis(port=survivors[0].port, decode_responses=True) as check:
            _until(lambda: check.cluster("info")["cluster_state"] == "ok", RECOVERY_SECONDS)
