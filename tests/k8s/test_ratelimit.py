"""Client-side rate limiting (settings ``*_client.qps`` and ``*_client.burst``)."""

from __future__ import annotations

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
    ("qps", "burst", "requests", "waited"),
    [
        pytest.param(10.0, 5, 5, 0.0, id="within-burst-no-wait"),
        pytest.param(10.0, 5, 6, 0.1, id="one-over-burst-waits-one-token"),
        pytest.param(2.0, 1, 3, 1.0, id="steady-rate"),
    ],
)
async def test_token_bucket(qps: float, burst: int, requests: int, waited: float) -> None:
    time = FakeTime()
    bucket = TokenBucket(qps, burst, clock=time, sleep=time.sleep)
    for _ in range(requests):
        await bucket.acquire()
    assert bucket.waited == pytest.approx(waited)


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="qps must be > 0"):
        TokenBucket(0, 1)
