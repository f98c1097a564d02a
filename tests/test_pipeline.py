"""The pipelined connection every script call of a process shares: each caller
gets its own reply, in order, whatever else is in the same batch (error
replies, callers who gave up), and nothing of an answered call is kept."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ReadOnlyError, ResponseError

from queuegate.embedded import EmbeddedServer, server_binary
from queuegate.pipeline import AutoPipeline, pack

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pipe(redis_url: str) -> AsyncIterator[AutoPipeline]:
    client = aioredis.Redis.from_url(redis_url)
    pool = client.connection_pool
    pipeline = AutoPipeline(lambda: pool.connection_class(**pool.connection_kwargs), 2.0, 4.0)
    yield pipeline
    await pipeline.aclose()
    await client.aclose()


async def test_each_caller_gets_its_own_reply_with_errors_in_the_same_batch(pipe: AutoPipeline) -> None:
    await pipe.send(pack("SET", "text", "not a list"))
    # One batch: counters, and commands that fail (a list command on a
    # string) between them.
    calls = []
    for i in range(600):
        if i % 5 == 3:
            calls.append(pipe.send(pack("LPUSH", "text", "x")))
        else:
            calls.append(pipe.send(pack("INCR", "counter")))
    replies = await asyncio.gather(*calls, return_exceptions=True)
    counts = []
    for i, reply in enumerate(replies):
        if i % 5 == 3:
            assert isinstance(reply, ResponseError)
            assert "WRONGTYPE" in str(reply)
        else:
            assert isinstance(reply, int)
            counts.append(reply)
    assert counts == list(range(1, len(counts) + 1))  # in the order sent


async def test_callers_who_gave_up_do_not_shift_the_replies_of_others(pipe: AutoPipeline) -> None:
    # Redis is held by a slow script (0.3 s) while the batch goes out, so the
    # callers below give up after their commands were written, before any
    # reply. (Connected first, so that writing is all that is left to do.)
    assert await pipe.send(pack("PING")) == b"PONG"
    slow = pipe.send(pack("EVAL", "local t = redis.call('TIME') while true do "
                          "local n = redis.call('TIME') if (n[1] - t[1]) * 1000000 + n[2] - t[2] "
                          "> 300000 then return 1 end end", 0))  # fmt: skip
    calls = [pipe.send(pack("INCR", "counter")) for _ in range(200)]
    await asyncio.sleep(0.1)  # written, not answered
    for i, call in enumerate(calls):
        if i % 7 == 0:
            call.cancel()
    assert await slow == 1
    kept = [(i, call) for i, call in enumerate(calls) if i % 7 != 0]
    replies = await asyncio.gather(*(call for _, call in kept))
    # Every caller still there got the value of its own INCR.
    assert replies == [i + 1 for i, _ in kept]


async def test_an_answered_call_is_not_kept(pipe: AutoPipeline) -> None:
    # Kept until its deadline, every answered call of a busy second would
    # outlive the young GC generations (and bring on full collections).
    calls = [pipe.send(pack("INCR", "counter")) for _ in range(100)]
    refs = [weakref.ref(call) for call in calls]
    for call in calls:
        await call
    del calls, call
    await asyncio.sleep(0)  # the event loop lets go of the handle that woke this test
    assert sum(ref() is not None for ref in refs) == 0


async def test_the_redis_py_internals_the_pipeline_reads_are_still_there(pipe: AutoPipeline) -> None:
    """The pipeline reads redis-py's private parser and writer (see
    pipeline.py); without them it falls back to slower public paths. This
    makes a redis-py release that moved them fail here, loudly, instead of
    making the gate silently slower. .ci/run runs it on the lowest and the
    highest redis-py that pyproject.toml allows."""
    try:
        from redis._parsers.hiredis import NOT_ENOUGH_DATA  # what the pipeline imports
    except ImportError:
        pytest.fail("redis._parsers.hiredis.NOT_ENOUGH_DATA is gone")
    assert NOT_ENOUGH_DATA is not None
    assert await pipe.send(pack("PING")) == b"PONG"
    link = pipe._link
    assert link is not None
    connection = link.connection
    assert getattr(connection, "_writer", None) is not None, "Connection._writer (a StreamWriter) is gone"
    parser = getattr(connection, "_parser", None)
    assert callable(getattr(parser, "read_response", None)), "Connection._parser.read_response is gone"
    reader = getattr(parser, "_reader", None)
    assert callable(getattr(reader, "gets", None)), "the hiredis parser's _reader.gets is gone"
    # And the early write really takes that path: 16 queued commands go out
    # on the StreamWriter without the write task.
    replies = await asyncio.gather(*(pipe.send(pack("INCR", "internals")) for _ in range(40)))
    assert replies == list(range(1, 41))


async def test_a_connection_that_finds_a_replica_is_given_up(own_server: EmbeddedServer) -> None:
    """After a failover the old master may come back as a replica: a
    connection still on it would get READONLY for every write. The pipeline
    drops it, so the next connection asks Sentinel where the master is."""
    binary = server_binary("path")
    with EmbeddedServer(binary, args=["--replicaof", "127.0.0.1", str(own_server.port)]) as replica:
        client = aioredis.Redis(port=replica.port)
        pool = client.connection_pool
        pipe = AutoPipeline(lambda: pool.connection_class(**pool.connection_kwargs), 2.0, 4.0)
        try:
            assert await pipe.send(pack("GET", "x")) is None  # reads work on a replica
            assert pipe._link is not None
            with pytest.raises(ReadOnlyError):
                await pipe.send(pack("SET", "x", "1"))
            assert pipe._link is None
        finally:
            await pipe.aclose()
            await client.aclose()


@pytest.mark.parametrize("calls", [1, 40])
async def test_calls_after_a_restart_find_the_server(own_server: EmbeddedServer, calls: int) -> None:
    """A connection idle when Redis restarts was found dead only by the
    next call, which failed: one 503 per process after every restart, with
    Redis already answering (an auditor's runs: 4 of 5). Redis closing the
    connection is heard while it is idle (the end of its stream): the next
    call opens a new one. So does a burst written at once, without the
    write task (16 calls or more queued in one turn of the loop)."""
    client = aioredis.Redis(port=own_server.port)
    pool = client.connection_pool
    pipe = AutoPipeline(lambda: pool.connection_class(**pool.connection_kwargs), 2.0, 4.0)
    try:
        assert await pipe.send(pack("PING")) == b"PONG"
        own_server.kill()
        own_server.start()
        await asyncio.sleep(0.05)  # the loop turns while the link is idle, as a server's does
        replies = await asyncio.gather(*(pipe.send(pack("INCR", "restarted")) for _ in range(calls)))
        assert replies == list(range(1, calls + 1))
    finally:
        await pipe.aclose()
        await client.aclose()
