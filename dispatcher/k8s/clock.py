"""An injectable clock for backoff, leases and deadlines (docs/fake-apiserver.md#9-client-facts).

anyio has no fake clock for asyncio, so code that waits or measures durations takes a
:class:`Clock`; tests pass a fake one.
"""

from __future__ import annotations

import datetime
import time
from typing import Protocol

import anyio


class Clock(Protocol):
    """Monotonic time, wall time and sleeping."""

    def monotonic(self) -> float:
        """Seconds on a monotonic scale (for durations and expiry)."""
        ...

    def utcnow(self) -> datetime.datetime:
        """The current wall time, timezone-aware UTC (for timestamps written to the API)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (cancellable)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def utcnow(self) -> datetime.datetime:
        """``datetime.now(UTC)``."""
        return datetime.datetime.now(datetime.UTC)

    async def sleep(self, seconds: float) -> None:
        """``anyio.sleep``."""
        await anyio.sleep(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()
