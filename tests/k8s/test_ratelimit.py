"""Client-side rate limiting (settings ``*_client.qps`` and ``*_client.burst``)."""

from __future__ import annotations

import anyio
import pytest

from dispatcher.k8s.ratelimit import TokenBucket


class FakeTime:
    """A clock that only moves when the bucket sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("qps", "burst", "requests", "waited", "immediate"),
    [
        pytest.param(10.0, 5, 5, 0.0, 5, id="within-burst-no-wait"),
        pytest.param(10.0, 5, 6, 0.1, 5, id="one-over-burst-waits-one-token"),
        pytest.param(2.0, 1, 3, 1.0, 1, id="steady-rate"),
    ],
)
async def test_token_bucket(
    qps: float, burst: int, requests: int, waited: float, immediate: int
) -> None:
    time = FakeTime()
    bucket = TokenBucket(qps, burst, clock=time, sleep=time.sleep)
    for _ in range(requests):
        await bucket.acquire()
    assert bucket.waited == pytest.approx(waited)
    assert bucket.immediate == immediate, "a token at hand is taken without the lock"


async def test_a_caller_never_overtakes_one_that_waits() -> None:
    """The lock-free path is taken only while nobody waits: a request that arrives while
    another sleeps for its token queues behind it, even if a token is due by then."""
    now = [0.0]
    wake = anyio.Event()

    async def sleep(seconds: float) -> None:
        await wake.wait()
        now[0] += seconds

    bucket = TokenBucket(1.0, 1, clock=lambda: now[0], sleep=sleep)
    order: list[str] = []

    async def take(name: str) -> None:
        await bucket.acquire()
        order.append(name)

    await bucket.acquire()  # the burst's one token
    async with anyio.create_task_group() as group:
        group.start_soon(take, "first")
        await anyio.wait_all_tasks_blocked()
        now[0] += 5.0  # tokens are due, but "first" holds the lock while it sleeps
        group.start_soon(take, "second")
        await anyio.wait_all_tasks_blocked()
        assert order == []
        wake.set()
    assert order == ["first", "second"]
    assert bucket.immediate == 1


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="qps must be > 0"):
        TokenBucket(0, 1)
