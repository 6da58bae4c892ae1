"""The e2e installation the modules of one pytest run share (``tests/e2e/conftest.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["Installations"]


class Installations:
    """The e2e installation the session's modules share: a real control plane takes ~14 s to
    start, and the ten modules of ``make e2e-real`` each started one (2 min 20 s of the CI's
    longest lane). Each scenario starts with ``reset`` and puts back what it changed (a
    dispatcher setting, a worker taken out of the config, Kueue's dispatcher) in a ``finally``,
    as it did within a module. After a failed test a module gets a new installation, so that a
    failure cannot leave the next module a broken one. A module marked ``own_installation``
    starts on a new one and leaves it to no other: the seeded mix's teardown leaves MultiKueue's
    worker clients a backlog of deletions behind their rate limit (C10) that delayed the next
    module's first copy by 4 s on real Kueue and not on the sandbox (a timing difference the
    differential reports)."""

    def __init__(self) -> None:
        self.current: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._failed_at = 0
        self._own = False

    async def get(
        self,
        failures: int,
        start: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
        *,
        own: bool = False,
    ) -> Any:
        """The shared installation, started with ``start`` if there is none, the session's
        count of ``failures`` grew since it was started, it was a module's own, or this module
        needs its ``own``."""
        if self.current is not None and (own or self._own or failures > self._failed_at):
            await self.close()
        if self.current is None:
            stack = contextlib.AsyncExitStack()
            self.current = await stack.enter_async_context(start())
            self._stack = stack
            self._failed_at = failures
        self._own = own
        return self.current

    async def close(self) -> None:
        """Stop the installation, if one runs."""
        stack, self._stack, self.current = self._stack, None, None
        if stack is not None:
            await stack.aclose()
