"""The de-duplicating work queue of the controller."""

from __future__ import annotations

import anyio
import pytest

from dispatcher.controller.workqueue import WorkQueue


class FakeTime:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_keys_are_deduplicated_and_fifo() -> None:
    queue = WorkQueue()
    for key in ("a", "b", "a", "c", "b"):
        queue.add(key)
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_key_added_while_processing_comes_back_once_after_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # not handed to a second worker while the first one works on it
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_add_after_waits_for_the_clock() -> None:
    time = FakeTime()
    queue = WorkQueue(clock=time)
    queue.add_after("later", 5.0)
    assert len(queue) == 0
    assert queue.delayed == 1
    time.now += 5.0
    with anyio.fail_after(2):
        assert await queue.get() == "later"


async def test_earlier_deadline_wins_and_add_cancels_the_delay() -> None:
    time = FakeTime()
    queue = WorkQueue(clock=time)
    queue.add_after("k", 10.0)
    queue.add_after("k", 2.0)
    time.now += 2.0
    with anyio.fail_after(2):
        assert await queue.get() == "k"
    queue.done("k")
    queue.add_after("k", 10.0)
    queue.add("k")
    assert queue.delayed == 0
    assert len(queue) == 1


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        pytest.param(1, 0.05, id="first-retry-base"),
        pytest.param(3, 0.2, id="doubles"),
        pytest.param(20, 30.0, id="capped"),
    ],
)
def test_rate_limited_backoff(failures: int, expected: float) -> None:
    queue = WorkQueue(base_delay=0.05, max_delay=30.0, clock=FakeTime())
    delays = [queue.add_rate_limited("k") for _ in range(failures)]
    assert delays[-1] == pytest.approx(expected)
    queue.forget("k")
    assert queue.failures("k") == 0


@pytest.mark.parametrize(
    ("failures", "retry_after", "expected"),
    [(1, 1.0, 1.0), (1, None, 0.05), (9, 1.0, 12.8), (1, 300.0, 30.0)],
    ids=["retry-after-wins", "no-retry-after", "backoff-wins", "capped-at-max"],
)
def test_rate_limited_honours_retry_after(
    failures: int, retry_after: float | None, expected: float
) -> None:
    """A server's Retry-After (429/503, issue 8) delays the retry at least that long."""
    queue = WorkQueue(base_delay=0.05, max_delay=30.0, clock=FakeTime())
    for _ in range(failures - 1):
        queue.add_rate_limited("k")
    assert queue.add_rate_limited("k", at_least=retry_after) == pytest.approx(expected)


async def test_close_ends_waiting_getters() -> None:
    queue = WorkQueue()
    async with anyio.create_task_group() as tg:

        async def getter() -> None:
            with pytest.raises(anyio.EndOfStream):
                await queue.get()

        tg.start_soon(getter)
        await anyio.wait_all_tasks_blocked()
        queue.close()


async def test_get_does_not_scan_every_deadline() -> None:
    """Issue 15: with 20,000 keys delayed far ahead, handing out one due key looks at a handful
    of heap entries (the due one and the next deadline), not at all 20,000."""
    time = FakeTime()
    queue = WorkQueue(clock=time)
    for i in range(20_000):
        queue.add_after(f"later-{i}", 600.0 + i)
    queue.add_after("soon", 1.0)
    time.now += 1.0
    before = queue.examined
    with anyio.fail_after(2):
        assert await queue.get() == "soon"
    assert queue.examined - before <= 3
    assert queue.delayed == 20_000


async def test_due_keys_come_out_in_deadline_order_and_stale_entries_are_bounded() -> None:
    """Keys promoted in the order of their deadlines whatever the order they were added in; a
    key re-added sooner or queued at once leaves a stale heap entry, and the heap stays within
    twice the delayed keys (plus a constant) however often that happens."""
    time = FakeTime()
    queue = WorkQueue(clock=time)
    order = [7, 3, 9, 1, 5, 2, 8, 6, 4, 0]
    for i in order:
        queue.add_after(f"k{i}", 10.0 + i)
    for _ in range(1_000):  # churn: each moved earlier, then queued at once and handed out
        queue.add_after("churn", 50.0)
        queue.add_after("churn", 40.0)
        queue.add("churn")
        assert await queue.get() == "churn"
        queue.done("churn")
    assert queue.heap_entries <= 2 * queue.delayed + 64
    time.now += 100.0
    with anyio.fail_after(2):
        assert [await queue.get() for _ in order] == [f"k{i}" for i in range(10)]
    assert queue.delayed == 0
