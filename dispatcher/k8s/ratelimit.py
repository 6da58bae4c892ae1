"""Client-side rate limiting per cluster: a token bucket with ``qps`` and ``burst``.

Every request through :class:`dispatcher.k8s.client.KubeApi` (watches and status patches
included) takes one token; up to ``burst`` requests may go at once, then ``qps`` per second.
Waiters are served in arrival order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

__all__ = ["TokenBucket"]


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` stored."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._updated: float | None = None
        self._lock = anyio.Lock()
        self.waited = 0.0
        """Seconds callers spent waiting in total (for tests and metrics)."""
        self.immediate = 0
        """Tokens taken at once, with nobody waiting and without the lock (for tests)."""

    def _refill(self) -> None:
        now = self._clock()
        if self._updated is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    async def acquire(self) -> None:
        """Take one token, waiting for it if the bucket is empty."""
        if not self._lock.locked():
            # Nobody waits (a waiter holds the lock while it sleeps), so a token at hand is
            # taken at once, in arrival order still, without the lock's two task switches.
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                self.immediate += 1
                return
        async with self._lock:
            self._refill()
            if self._tokens < 1.0:
                delay = (1.0 - self._tokens) / self.qps
                self.waited += delay
                await self._sleep(delay)
                self._refill()
            self._tokens -= 1.0
