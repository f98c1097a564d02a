"""Background tasks stopped for good (queuegate.tasks.stop)."""

from __future__ import annotations

import asyncio

import pytest

from queuegate.tasks import stop

pytestmark = pytest.mark.anyio


def swallowing_one_cancel() -> asyncio.Task[None]:
    """A loop whose first cancel is lost, as a cancel landing while one of
    redis-py's own ``asyncio.wait_for`` calls completes is on Python 3.11."""

    async def loop() -> None:
        lost = False
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost = True

    return asyncio.ensure_future(loop())


async def test_a_cancel_once_swallowed_is_made_again() -> None:
    plain = swallowing_one_cancel()
    await asyncio.sleep(0)
    plain.cancel()
    with pytest.raises(TimeoutError):  # what aclose did: wait for ever
        async with asyncio.timeout(0.3):
            await asyncio.shield(plain)
    task = swallowing_one_cancel()
    await asyncio.sleep(0)
    async with asyncio.timeout(2):
        await stop([task, plain])
    assert task.cancelled()
    assert plain.cancelled()


async def test_what_a_task_ended_with_is_read() -> None:
    async def fails() -> None:
        raise RuntimeError("lost")

    task = asyncio.ensure_future(fails())
    await asyncio.sleep(0)
    await stop([task])  # no "exception was never retrieved" later
    assert task.done()
    assert isinstance(task.exception(), RuntimeError)
