"""Operate a room from Python without the gate object: a Store on the same Redis."""

import asyncio
import os

import redis.asyncio

from queuegate import Store

REDIS_URL = os.environ.get("QUEUEGATE_REDIS_URL", "redis://localhost:6379/0")


async def main() -> None:
    store = Store(redis.asyncio.Redis.from_url(REDIS_URL))
    try:
        await store.configure("sale", rate=5)  # every process, next request; holds until reset
        stats = await store.stats("sale")
        print(f"waiting {stats['waiting']}, active {stats['active']}, admitted {stats['admitted']}")
    finally:
        await store.aclose()


asyncio.run(main())
