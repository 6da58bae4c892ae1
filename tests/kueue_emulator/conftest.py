"""Fixtures of the Kueue emulation tests (the helpers live in ``core_env``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher_sandbox.harness.emulator_env import KueueEnv, start_env


@pytest.fixture
async def kueue_env(crds_dir: Path) -> AsyncIterator[KueueEnv]:
    """A worker cluster running the Kueue core (``role="worker"``)."""
    async with start_env(crds_dir, role="worker") as env:
        yield env


@pytest.fixture
async def manager_kueue_env(crds_dir: Path) -> AsyncIterator[KueueEnv]:
    """A manager cluster running the Kueue core (``role="manager"``), without MultiKueue."""
    async with start_env(crds_dir, role="manager") as env:
        yield env
