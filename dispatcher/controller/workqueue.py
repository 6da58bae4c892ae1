"""A de-duplicating work queue with delayed and rate-limited re-adds (controller-runtime style).

A key is in the queue at most once. While a worker processes a key, adding it again marks it
dirty: it is queued once more when the worker calls :meth:`WorkQueue.done`, so two workers never
reconcile the same workload at the same time and no change is lost.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

import anyio

__all__ = ["WorkQueue"]


class WorkQueue:
    """Keys waiting for a reconcile; safe to use from many tasks of one event loop."""

    def __init__(
        self,
        *,
        base_delay: float = 0.05,
        max_delay: float = 30.0,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._deadlines: dict[str, float] = {}
        self._wakeup = anyio.Event()
        self._base = base_delay
        self._max = max_delay
        self._clock = clock
        self._closed = False

    def __len__(self) -> int:
        """Keys waiting (not counting those being processed or delayed)."""
        return len(self._queue)

    @property
    def delayed(self) -> int:
        """Keys waiting for a delay to pass."""
        return len(self._deadlines)

    def _wake(self) -> None:
        self._wakeup.set()
        self._wakeup = anyio.Event()

    def add(self, key: str) -> None:
        """Queue ``key`` now (once); if it is being processed, queue it again after."""
        self._deadlines.pop(key, None)
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queue:
            self._queue[key] = None
            self._wake()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds (an earlier pending deadline wins)."""
        if delay <= 0:
            self.add(key)
            return
        deadline = self._clock() + delay
        current = self._deadlines.get(key)
        if current is None or deadline < current:
            self._deadlines[key] = deadline
            self._wake()

    def add_rate_limited(self, key: str, *, at_least: float | None = None) -> float:
        """Queue ``key`` after an exponential backoff of its recent failures, and not before
        ``at_least`` seconds (a server's ``Retry-After``, capped at the maximum delay); returns
        the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self._max, self._base * math.pow(2, failures))
        if at_least is not None:
            delay = max(delay, min(self._max, at_least))
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset the failure count of ``key`` (after a successful reconcile)."""
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        """How many rate-limited re-adds ``key`` had since it was last forgotten."""
        return self._failures.get(key, 0)

    def _promote_due(self) -> float | None:
        now = self._clock()
        next_deadline: float | None = None
        for key, deadline in list(self._deadlines.items()):
            if deadline <= now:
                del self._deadlines[key]
                self.add(key)
            elif next_deadline is None or deadline < next_deadline:
                next_deadline = deadline
        return next_deadline

    async def get(self) -> str:
        """Wait for the next key and mark it as being processed."""
        while True:
            if self._closed:
                raise anyio.EndOfStream
            next_deadline = self._promote_due()
            if self._queue:
                key, _ = self._queue.popitem(last=False)
                self._processing.add(key)
                return key
            wakeup = self._wakeup
            if next_deadline is None:
                await wakeup.wait()
            else:
                with anyio.move_on_after(max(0.0, next_deadline - self._clock())):
                    await wakeup.wait()

    def done(self, key: str) -> None:
        """Finish processing ``key``; queue it again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        """Stop handing out keys: waiting and future :meth:`get` calls raise ``EndOfStream``."""
        self._closed = True
        self._wake()
