"""Tests on the real control plane (real kube-apiserver, etcd and Kueue processes).

Skipped, saying why, where the binaries are not built (``python -m
dispatcher.sandbox.real.build``); a failure instead under ``REQUIRE_REAL_BACKEND=1`` (CI).
"""

from __future__ import annotations

import os

import pytest

from dispatcher.sandbox.real.build import missing_binaries


@pytest.fixture(autouse=True, scope="session")
def real_binaries() -> None:
    """The real control plane's binaries are built."""
    missing = missing_binaries()
    if missing:
        reason = (
            f"real control plane binaries not built ({', '.join(missing)}): run "
            "`python -m dispatcher.sandbox.real.build` (needs Go)"
        )
        if os.environ.get("REQUIRE_REAL_BACKEND") == "1":
            pytest.fail(reason + " (REQUIRE_REAL_BACKEND=1)")
        pytest.skip(reason)
