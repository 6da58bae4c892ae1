"""A fake clock for leader-election tests (notes 2.4: inject the clock)."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import anyio

NS = "default"


class FakeClock:
    """Virtual time that moves only when a test calls :meth:`advance`.

    ``sleep`` waits until the virtual time reaches its end; :meth:`wait_for_sleepers` lets a test
    know the code under test is parked before it advances the time.
    """

    def __init__(self) -> None:
        self.now = 1000.0
        self.start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self.sleepers = 0
        self.sleeps = 0  # sleep calls so far
        self._changed = anyio.Condition()

    def monotonic(self) -> float:
        return self.now

    def utcnow(self) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=self.now - 1000.0)

    async def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        async with self._changed:
            self.sleepers += 1
            self.sleeps += 1
            self._changed.notify_all()
            try:
                while self.now < until:
                    await self._changed.wait()
            finally:
                self.sleepers -= 1
                self._changed.notify_all()

    async def advance(self, seconds: float) -> None:
        async with self._changed:
            self.now += seconds
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            while not predicate():
                await self._changed.wait()

    async def wait_for_sleepers(self, count: int = 1) -> None:
        await self.wait_for(lambda: self.sleepers >= count)
