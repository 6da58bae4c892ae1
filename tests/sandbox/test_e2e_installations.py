"""How the e2e modules of one pytest run share an installation
(``dispatcher_sandbox.harness.e2e.installations``): one start for modules that pass, a new one
after a failure and around a module that needs its own, and every started one stopped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from dispatcher_sandbox.harness.e2e.installations import Installations


@dataclass
class Ledger:
    """What the stand-in installations did: ``started`` and ``stopped`` by number."""

    started: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)

    @contextlib.asynccontextmanager
    async def start(self) -> AsyncIterator[int]:
        number = len(self.started) + 1
        self.started.append(number)
        try:
            yield number
        finally:
            self.stopped.append(number)


@dataclass(frozen=True)
class Module:
    """A module's request: the session's failures so far, and whether it needs its own."""

    failures: int = 0
    own: bool = False


@pytest.mark.parametrize(
    ("modules", "served"),
    [
        pytest.param([Module(), Module(), Module()], [1, 1, 1], id="passing-modules-share-one"),
        pytest.param(
            [Module(), Module(failures=1), Module(failures=1)],
            [1, 2, 2],
            id="a-failure-gives-the-next-module-a-new-one",
        ),
        pytest.param(
            [Module(), Module(own=True), Module(), Module()],
            [1, 2, 3, 3],
            id="a-module-of-its-own-starts-one-and-leaves-it-to-none",
        ),
        pytest.param([Module(own=True), Module(own=True)], [1, 2], id="two-own-modules-in-a-row"),
    ],
)
async def test_which_installation_each_module_gets(
    modules: list[Module], served: list[int]
) -> None:
    ledger = Ledger()
    shared = Installations()
    got = [await shared.get(m.failures, ledger.start, own=m.own) for m in modules]
    assert got == served
    assert ledger.stopped == list(range(1, max(served)))  # all but the last, in order
    await shared.close()
    assert ledger.stopped == ledger.started
    await shared.close()  # closing twice stops nothing twice
    assert ledger.stopped == ledger.started
