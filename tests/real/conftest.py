"""Tests on the real control plane (real kube-apiserver, etcd and Kueue processes).

Skipped, saying why, where the binaries are not built (``python -m
dispatcher_sandbox.real_kueue.build``); a failure instead under ``REQUIRE_REAL_BACKEND=1`` (CI).
"""

from __future__ import annotations

import pytest

from dispatcher_sandbox.harness.scenario import require_real_backend


@pytest.fixture(autouse=True, scope="session")
def real_binaries() -> None:
    """The real control plane's binaries are built."""
    require_real_backend()
