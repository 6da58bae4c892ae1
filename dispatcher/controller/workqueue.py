"""A de-duplicating work queue with delayed and rate-limited re-adds (controller-runtime style).

A key is in the queue at most once. While a worker processes a key, adding it again marks it
dirty: it is queued once more when the worker calls :meth:`WorkQueue.done`, so two workers never
reconcile the same workload at the same time and no change is lost.

Delayed keys wait in a binary heap of deadlines (as client-go's delaying queue keeps them), so
handing out a key costs O(log n) in the number of delayed keys, never a scan of all of them. A
key's deadline lives in a dict; a heap entry whose deadline is no longer the key's (the key was
added earlier, or now) is stale and dropped when it reaches the top, and the heap is rebuilt when
stale entries outnumber live ones, so its size stays proportional to the delayed keys.
"""

from __future__ import annotations

import heapq
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
        self._heap: list[tuple[float, int, str]] = []
        self._sequence = 0
        self.examined = 0
        """Heap entries looked at to promote due keys, in total (operation-count tests)."""
        self._wakeup = anyio.Event()
        self._base = base_delay
        self._max = max_delay
        self._clock = clock
        self._closed = False

    def __len__(self) -> int:
        """Keys waiting (not counting those being processed or delayed)."""
        return len(self._queue)

    def deadline(self, key: str) -> float | None:
        """When a delayed ``key`` is due (on the queue's clock), or None when it is not delayed."""
        return self._deadlines.get(key)

    @property
    def processing(self) -> frozenset[str]:
        """Keys being processed now (at most one per worker)."""
        return frozenset(self._processing)

    @property
    def delayed(self) -> int:
        """Keys waiting for a delay to pass."""
        return len(self._deadlines)

    @property
    def heap_entries(self) -> int:
        """Entries in the deadline heap, stale ones included (bounded by the delayed keys)."""
        return len(self._heap)

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
            self._sequence += 1
            heapq.heappush(self._heap, (deadline, self._sequence, key))
            if len(self._heap) > 2 * len(self._deadlines) + 64:
                self._compact()
            self._wake()

    def _compact(self) -> None:
        """Drop the stale heap entries (keys added since, or given an earlier deadline)."""
        self._heap = [e for e in self._heap if self._deadlines.get(e[2]) == e[0]]
        heapq.heapify(self._heap)

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
        """Queue every key whose deadline passed; return the next deadline (None: none)."""
        now = self._clock()
        heap = self._heap
        while heap:
            deadline, _, key = heap[0]
            self.examined += 1
            if self._deadlines.get(key) != deadline:
                heapq.heappop(heap)  # stale: the key was added or moved earlier since
                continue
            if deadline > now:
                return deadline
            heapq.heappop(heap)
            del self._deadlines[key]
            self.add(key)
        return None

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
