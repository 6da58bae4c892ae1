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


class Taken:
    """The keys the workers took, and an event set once ``expected`` of them were."""

    def __init__(self, expected: int) -> None:
        self.keys: list[str] = []
        self.expected = expected
        self.all = anyio.Event()

    def append(self, key: str) -> None:
        self.keys.append(key)
        if len(self.keys) == self.expected:
            self.all.set()


async def _workers(queue: WorkQueue, count: int, seen: Taken, group: anyio.abc.TaskGroup) -> None:
    """``count`` workers taking keys off ``queue`` (each recorded in ``seen``) until it closes."""

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except anyio.EndOfStream:
                return
            seen.append(key)
            queue.done(key)

    for _ in range(count):
        group.start_soon(worker)
    await anyio.wait_all_tasks_blocked()


@pytest.mark.parametrize("workers", [1, 4, 16], ids=["1-worker", "4-workers", "16-workers"])
async def test_a_queued_key_wakes_one_waiting_worker_not_all(workers: int) -> None:
    """Issue 15: each key queued while every worker waits wakes one of them (client-go's
    ``Signal``), not every idle worker; the old queue woke all ``workers`` for each key."""
    queue = WorkQueue()
    seen = Taken(100)
    async with anyio.create_task_group() as group:
        await _workers(queue, workers, seen, group)
        for i in range(100):
            queue.add(f"k{i}")
            await anyio.wait_all_tasks_blocked()
        queue.close()
    assert seen.keys == [f"k{i}" for i in range(100)]
    assert queue.wakeups - workers <= 100  # close() wakes each waiting worker once more


async def test_keys_queued_together_are_shared_and_none_is_left_waiting() -> None:
    queue = WorkQueue()
    seen = Taken(50)
    async with anyio.create_task_group() as group:
        await _workers(queue, 4, seen, group)
        for i in range(50):
            queue.add(f"k{i}")
        with anyio.fail_after(5):
            await seen.all.wait()
        queue.close()
    assert sorted(seen.keys) == sorted(f"k{i}" for i in range(50))
    assert queue.wakeups - 4 <= 50


async def test_earlier_deadlines_wake_only_the_timekeeper() -> None:
    """Moving the earliest deadline forward wakes the one worker that keeps the time (at most
    once per move), never the workers waiting for keys; the keys come out when due."""
    queue = WorkQueue()
    seen = Taken(21)
    async with anyio.create_task_group() as group:
        await _workers(queue, 4, seen, group)
        queue.add_after("first", 0.2)  # no timekeeper yet: one waiting worker becomes it
        await anyio.wait_all_tasks_blocked()
        before = queue.wakeups
        for i in range(20):
            queue.add_after(f"d{i}", 0.15 - i * 0.005)  # each earlier than the last
            await anyio.wait_all_tasks_blocked()
        moved = queue.wakeups - before
        with anyio.fail_after(5):
            await seen.all.wait()
        queue.close()
    assert moved <= 20
    assert sorted(seen.keys) == sorted(["first", *(f"d{i}" for i in range(20))])


async def test_a_worker_cancelled_after_its_wake_up_passes_the_key_on() -> None:
    """A worker woken for a key but cancelled before it could take it wakes the next one."""
    queue = WorkQueue()
    got: list[str] = []
    async with anyio.create_task_group() as group:
        cancelled = anyio.CancelScope()

        async def first() -> None:
            with cancelled:
                await queue.get()
                pytest.fail("the cancelled worker took the key")

        async def second() -> None:
            got.append(await queue.get())

        group.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        cancelled.cancel()  # the oldest waiter is cancelled; before it runs ...
        queue.add("k")  # ... the key wakes it: it must wake the next waiter instead
        with anyio.fail_after(2):
            while not got:
                await anyio.wait_all_tasks_blocked()
    assert got == ["k"]
