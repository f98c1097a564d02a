"""The coalescer that joins and check-ins share (queuegate.coalescing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from queuegate.coalescing import Coalescer

pytestmark = pytest.mark.anyio


class Recorder:
    """A call that records its batches and answers after ``release``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def send(self, context: str, items: list[str]) -> list[str]:
        self.batches.append(items)
        await self.release.wait()
        if self.fail:
            raise ConnectionError("Redis went away")
        return [f"{context}:{item}" for item in items]


async def test_items_of_one_turn_go_together_and_those_during_a_call_after_it() -> None:
    recorder = Recorder()
    coalescer: Coalescer[str, str] = Coalescer(recorder.send, max_wait=10.0, max_batch=100)
    first = [asyncio.ensure_future(coalescer.add("room", "r", item)) for item in ("a", "b", "a")]
    await asyncio.sleep(0.001)
    assert recorder.batches == [["a", "b"]]  # sent at the end of the turn; "a" asked twice, sent once
    # While that call is in flight, later items wait for it (not for max_wait).
    later = [asyncio.ensure_future(coalescer.add("room", "r", item)) for item in ("c", "d")]
    other = asyncio.ensure_future(coalescer.add("other", "o", "x"))  # another key: its own call
    await asyncio.sleep(0.01)
    assert recorder.batches == [["a", "b"], ["x"]]
    recorder.release.set()
    assert await asyncio.gather(*first) == ["r:a", "r:b", "r:a"]
    assert await asyncio.gather(*later) == ["r:c", "r:d"]
    assert await other == "o:x"
    assert recorder.batches == [["a", "b"], ["x"], ["c", "d"]]
    await coalescer.aclose()


async def test_a_waiting_batch_goes_after_max_wait_if_the_call_in_flight_hangs() -> None:
    recorder = Recorder()
    coalescer: Coalescer[str, str] = Coalescer(recorder.send, max_wait=0.02, max_batch=2)
    hung = asyncio.ensure_future(coalescer.add("room", "r", "a"))
    await asyncio.sleep(0.005)
    waiting = [asyncio.ensure_future(coalescer.add("room", "r", item)) for item in ("b", "c", "d")]
    await asyncio.sleep(0.002)
    assert recorder.batches == [["a"], ["b", "c"]]  # full at max_batch: sent at once
    await asyncio.sleep(0.05)
    assert recorder.batches == [["a"], ["b", "c"], ["d"]]  # after max_wait
    recorder.fail = True
    recorder.release.set()
    for future in [hung, *waiting]:
        with pytest.raises(ConnectionError):
            await future  # a failed call is every item's failure
    await coalescer.aclose()


async def test_a_caller_giving_up_leaves_the_others_answer_alone() -> None:
    recorder = Recorder()
    coalescer: Coalescer[str, str] = Coalescer(recorder.send, max_wait=10.0, max_batch=100)
    gives_up = asyncio.ensure_future(coalescer.add("room", "r", "a"))
    stays = asyncio.ensure_future(coalescer.add("room", "r", "a"))  # the same item, asked again
    alone = asyncio.ensure_future(coalescer.add("room", "r", "b"))
    await asyncio.sleep(0.001)
    gives_up.cancel()
    alone.cancel()
    await asyncio.sleep(0)
    recorder.release.set()
    assert await stays == "r:a"
    assert gives_up.cancelled()
    assert alone.cancelled()
    assert recorder.batches == [["a", "b"]]  # the call went for both, and came back
    await coalescer.aclose()


async def test_in_a_storm_a_batch_waits_for_companions_with_no_call_in_flight() -> None:
    recorder = Recorder()
    recorder.release.set()  # calls come back at once: nothing is ever in flight for long
    coalescer: Coalescer[str, str] = Coalescer(recorder.send, max_wait=0.02, max_batch=100, busy_within=0.5)
    assert await coalescer.add("room", "r", "a") == "r:a"  # the first after a quiet spell: at once
    assert recorder.batches == [["a"]]
    # Within busy_within of the last batch: the next one waits max_wait, so
    # items arriving in other loop turns meanwhile go with it.
    first = asyncio.ensure_future(coalescer.add("room", "r", "b"))
    await asyncio.sleep(0.002)
    second = asyncio.ensure_future(coalescer.add("room", "r", "c"))
    await asyncio.sleep(0.002)
    assert recorder.batches == [["a"]]
    assert list(await asyncio.gather(first, second)) == ["r:b", "r:c"]
    assert recorder.batches == [["a"], ["b", "c"]]
    # Without busy_within, each loop turn's items go at its end.
    eager: Coalescer[str, str] = Coalescer(recorder.send, max_wait=0.02, max_batch=100)
    await eager.add("room", "r", "d")
    later = asyncio.ensure_future(eager.add("room", "r", "e"))
    await asyncio.sleep(0.002)
    assert recorder.batches[-2:] == [["d"], ["e"]]
    await later
    await coalescer.aclose()
    await eager.aclose()


async def test_in_a_storm_a_reply_does_not_send_the_batch_before_max_wait() -> None:
    recorder = Recorder()
    coalescer: Coalescer[str, str] = Coalescer(recorder.send, max_wait=0.05, max_batch=100, busy_within=0.5)
    first = asyncio.ensure_future(coalescer.add("room", "r", "a"))
    await asyncio.sleep(0.001)
    assert recorder.batches == [["a"]]  # in flight
    second = asyncio.ensure_future(coalescer.add("room", "r", "b"))  # busy: it lingers
    await asyncio.sleep(0.001)
    recorder.release.set()
    assert await first == "r:a"
    await asyncio.sleep(0.005)
    assert recorder.batches == [["a"]]  # the reply did not send "b" alone
    assert await second == "r:b"
    assert recorder.batches == [["a"], ["b"]]
    await coalescer.aclose()


async def test_in_a_storm_a_batch_waits_a_few_of_its_keys_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    # A steady stream, one item every 10 ms: max_wait (2 ms) alone sends each
    # in a call of its own; waiting ten of the key's mean gaps (100 ms, but
    # at most max_linger, 60 ms) gathers a few a call, none held longer
    # than max_linger.
    # The waits are the delays the coalescer asks of the loop: a wall clock
    # adds a loaded machine's stalls (0.57 s once in CI, beside a benchmark).
    recorder = Recorder()
    recorder.release.set()
    lingering: Coalescer[str, str] = Coalescer(
        recorder.send, max_wait=0.002, max_batch=100, busy_within=0.05, linger_gaps=10.0, max_linger=0.06
    )
    loop = asyncio.get_running_loop()
    waits: list[float] = []
    call_later = loop.call_later

    def asked(delay: float, callback: Any, *args: Any, **options: Any) -> asyncio.TimerHandle:
        if getattr(callback, "__name__", "") == "_flush":
            waits.append(delay)
        return call_later(delay, callback, *args, **options)

    monkeypatch.setattr(loop, "call_later", asked)
    items = [asyncio.ensure_future(lingering.add("room", "r", "0"))]
    for i in range(1, 40):
        await asyncio.sleep(0.01)
        items.append(asyncio.ensure_future(lingering.add("room", "r", str(i))))
    assert await asyncio.gather(*items) == [f"r:{i}" for i in range(40)]
    assert sorted(item for batch in recorder.batches for item in batch) == sorted(str(i) for i in range(40))
    assert len(recorder.batches) <= 40 / 2.5  # 3-6 a call once the first went at once
    assert max(waits) == pytest.approx(0.06)  # it lingered, up to max_linger and no longer
    await lingering.aclose()


async def test_the_storm_figures_of_quiet_keys_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rooms from a URL are as many as the values visitors send: a key's
    storm figures go once it has been quiet for a while, so that they stay
    about as many as the keys of the last moment, not every key ever seen."""
    import queuegate.coalescing as coalescing

    monkeypatch.setattr(coalescing, "KEEP_KEYS", 50, raising=False)
    monkeypatch.setattr(coalescing, "FORGET_S", 0.02, raising=False)

    async def send(context: str, items: list[str]) -> list[str]:
        return items

    coalescer: Coalescer[str, str] = Coalescer(
        send, max_wait=0.001, max_batch=100, busy_within=0.005, linger_gaps=3.0, max_linger=0.003
    )
    most = 0
    for wave in range(20):
        await asyncio.gather(*(coalescer.add(f"room{wave}-{key}", "r", "v") for key in range(100)))
        most = max(most, len(coalescer._gaps), len(coalescer._opened))
        await asyncio.sleep(0.03)
    assert most <= 300, most  # two waves and the threshold, not 2,000


async def test_joins_forget_rooms_past_their_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    import queuegate.joins as joins_module
    from queuegate.joins import Joins

    monkeypatch.setattr(joins_module, "KEEP_KEYS", 50, raising=False)
    monkeypatch.setattr(joins_module, "UNSETTLED_BACKOFF", 0.01)

    async def unsettled(room: object, joins: object) -> None:
        return None  # no room is settled: each is marked, for its backoff

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    joins = Joins(unsettled)
    most = 0
    for wave in range(20):
        await asyncio.gather(*(joins.join(Named(f"room{wave}-{key}"), "v", "c") for key in range(100)))
        most = max(most, len(joins._unsettled))
        await asyncio.sleep(0.02)
    await joins.aclose()
    assert most <= 300, most
