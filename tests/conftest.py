"""Fixtures shared by every test: the anyio backend and the real Kueue CRDs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher.sandbox.kueue_crds import ENV_VAR, kueue_crds_dir


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """kubernetes_asyncio is asyncio-only."""
    return "asyncio"


@pytest.fixture(scope="session")
def crds_dir() -> Path:
    """The real Kueue v0.19.2 CRD folder; skipped without it, except where CI requires it."""
    path = kueue_crds_dir()
    if path is None:
        reason = f"Kueue CRDs not found: set {ENV_VAR} to the folder of the Kueue v0.19.2 CRD files"
        if os.environ.get("REQUIRE_KUEUE_CRDS") == "1":
            pytest.fail(reason + " (REQUIRE_KUEUE_CRDS=1)")
        pytest.skip(reason)
    return path


EMULATOR_AGENT = "kueue-emulator/"


@pytest.fixture(autouse=True)
def no_unexpected_emulator_rejections() -> Iterator[None]:
    """Issue 3: no write of the Kueue emulation is ever rejected (422) by a schema, CEL rule or
    admission hook, except on clusters where a test provokes it (``rejections_expected``)."""
    from dispatcher.sandbox.fakeapi.server import REJECTIONS

    before = len(REJECTIONS)
    yield
    unexpected = [
        r for r in REJECTIONS[before:] if r.user_agent.startswith(EMULATOR_AGENT) and not r.expected
    ]
    if unexpected:
        details = "; ".join(f"{r.cluster} {r.method} {r.path}: {r.message}" for r in unexpected)
        pytest.fail(
            f"the Kueue emulation had {len(unexpected)} write(s) rejected: {details} "
            "(a test that provokes this on purpose sets `rejections_expected = True` on that "
            "FakeCluster)"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report the emulation's rejected writes over the whole session (expected: zero)."""
    from dispatcher.sandbox.fakeapi.server import REJECTIONS

    emulator = [r for r in REJECTIONS if r.user_agent.startswith(EMULATOR_AGENT)]
    provoked = sum(1 for r in emulator if r.expected)
    terminalreporter.write_line(
        f"Kueue emulation writes rejected with 422: {len(emulator) - provoked} unexpected, "
        f"{provoked} provoked on purpose; all 422 answers in the session: {len(REJECTIONS)}"
    )
