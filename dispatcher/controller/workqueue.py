"""A de-duplicating work queue with delayed and rate-limited re-adds (controller-runtime style).

A key is in the queue at most once. While a worker processes a key, adding it again marks it
dirty: it is queued once more when the worker calls :meth:`WorkQueue.done`, so two workers never
reconcile the same workload at the same time and no change is lost.

Delayed keys wait in a binary heap of deadlines (as client-go's delaying queue keeps them), so
handing out a key costs O(log n) in the number of delayed keys, never a scan of all of them. A
key's deadline lives in a dict; a heap entry whose deadline is no longer the key's (the key was
added earlier, or now) is stale and dropped when it reaches the top, and the heap is rebuilt when
stale entries outnumber live ones, so its size stays proportional to the delayed keys.

Waiting workers are woken one per queued key, as client-go's condition variable signals one
waiter per ``Add``: a key never wakes every idle worker (which would each find the queue empty
again and go back to waiting). One waiting worker at a time, the *timekeeper*, also waits for
the earliest deadline; the others wait for keys only. An earlier deadline wakes the timekeeper
alone (or, when there is none, one worker to become it).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
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
        self.wakeups = 0
        """Waiting workers woken, in total (operation-count tests: at most one per key queued
        or deadline moved earlier, however many workers wait)."""
        self._waiters: deque[anyio.Event] = deque()
        """Workers waiting for a key, oldest first."""
        self._timekeeper: anyio.Event | None = None
        """The waiting worker that also waits for the earliest deadline."""
        self._timed = math.inf
        """The deadline the timekeeper waits for."""
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

    def _wake_waiter(self) -> None:
        self._waiters.popleft().set()
        self.wakeups += 1

    def _wake_timekeeper(self) -> None:
        assert self._timekeeper is not None
        if not self._timekeeper.is_set():
            self._timekeeper.set()
            self.wakeups += 1

    def _notify(self) -> None:
        """A key is waiting: wake one waiting worker (the timekeeper when no other waits)."""
        if self._waiters:
            self._wake_waiter()
        elif self._timekeeper is not None:
            self._wake_timekeeper()

    def _reschedule(self, deadline: float) -> None:
        """``deadline`` is earlier than the one waited for: wake the timekeeper to wait for it,
        or, when no worker keeps time, one waiting worker to become the timekeeper."""
        if deadline >= self._timed:
            return
        if self._timekeeper is not None:
            self._wake_timekeeper()
        elif self._waiters:
            self._wake_waiter()

    def _hand_on(self) -> None:
        """A woken worker (or the timekeeper) was cancelled before it ran: wake another for
        the keys waiting, or to keep the time for the deadlines left."""
        if self._queue:
            self._notify()
        elif self._deadlines and self._timekeeper is None:
            self._reschedule(min(self._deadlines.values()))

    def add(self, key: str) -> None:
        """Queue ``key`` now (once); if it is being processed, queue it again after."""
        if self._enqueue(key):
            self._notify()

    def _enqueue(self, key: str) -> bool:
        """Queue ``key`` without waking anyone; whether it was newly queued."""
        self._deadlines.pop(key, None)
        if key in self._processing:
            self._dirty.add(key)
            return False
        if key in self._queue:
            return False
        self._queue[key] = None
        return True

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
            self._reschedule(deadline)

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
            self._enqueue(key)  # the caller takes one and wakes a worker for the rest
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
                if self._queue:
                    self._notify()  # more keys (promoted together): the next worker
                elif self._timekeeper is None and next_deadline is not None:
                    self._reschedule(next_deadline)  # someone else keeps the time now
                return key
            waiter = anyio.Event()
            if next_deadline is not None and self._timekeeper is None:
                await self._keep_time(waiter, next_deadline)
            else:
                await self._wait(waiter)

    async def _wait(self, waiter: anyio.Event) -> None:
        """Wait for a key (or an earlier deadline to keep the time for)."""
        self._waiters.append(waiter)
        try:
            await waiter.wait()
        except BaseException:
            if waiter.is_set():
                self._hand_on()
            else:
                self._waiters.remove(waiter)
            raise

    async def _keep_time(self, waiter: anyio.Event, deadline: float) -> None:
        """Wait for a key or until ``deadline`` (the earliest), as the timekeeper."""
        self._timekeeper, self._timed = waiter, deadline
        try:
            with anyio.move_on_after(max(0.0, deadline - self._clock())):
                await waiter.wait()
        except BaseException:
            self._timekeeper, self._timed = None, math.inf
            self._hand_on()
            raise
        self._timekeeper, self._timed = None, math.inf

    def done(self, key: str) -> None:
        """Finish processing ``key``; queue it again if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        """Stop handing out keys: waiting and future :meth:`get` calls raise ``EndOfStream``."""
        self._closed = True
        while self._waiters:
            self._waiters.popleft().set()
        if self._timekeeper is not None:
            self._timekeeper.set()
