"""Fixtures shared by every test: the anyio backend and the real Kueue CRDs."""

from __future__ import annotations

import os
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
