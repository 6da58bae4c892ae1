"""The scenario suite's backend: ``sandbox`` (default), ``real`` or ``kind``.

Choose with ``pytest tests/e2e --backend real`` or ``E2E_BACKEND=real``. The real backend is
skipped, with the reason, where its binaries are not built (``python -m
dispatcher.sandbox.real.build``), except under ``REQUIRE_REAL_BACKEND=1`` (CI), where that
fails. The kind backend is skipped, with the reason, where docker, kind or the clusters are
missing (``hack/kind-e2e.sh`` creates them and runs the suite).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("sandbox", "real", "kind")
KUEUE_VERSIONS = ("v0.19", "v0.20")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="backend of the e2e scenario suite (default: $E2E_BACKEND or sandbox)",
    )
    parser.addoption(
        "--kueue-version",
        choices=KUEUE_VERSIONS,
        default=None,
        help="Kueue minor version of the sandbox's emulation (default: $E2E_KUEUE_VERSION or "
        "v0.19); the real backend runs Kueue v0.19.2, kind the release hack/kind-e2e.sh installs",
    )


def backend_name(config: pytest.Config) -> str:
    """The chosen backend: the option, else ``E2E_BACKEND``, else ``sandbox``."""
    chosen = config.getoption("--backend", default=None) or os.environ.get("E2E_BACKEND")
    chosen = chosen or "sandbox"
    if chosen not in BACKENDS:
        raise pytest.UsageError(f"E2E_BACKEND={chosen!r}: choose one of {', '.join(BACKENDS)}")
    return str(chosen)


def kueue_version(config: pytest.Config) -> str:
    """The emulated Kueue version: the option, else ``E2E_KUEUE_VERSION``, else ``v0.19``."""
    chosen = config.getoption("--kueue-version", default=None)
    chosen = chosen or os.environ.get("E2E_KUEUE_VERSION") or "v0.19"
    if chosen not in KUEUE_VERSIONS:
        raise pytest.UsageError(
            f"E2E_KUEUE_VERSION={chosen!r}: choose one of {', '.join(KUEUE_VERSIONS)}"
        )
    if chosen != "v0.19" and backend_name(config) != "sandbox":
        raise pytest.UsageError(
            f"--kueue-version {chosen} is the sandbox emulation's; the {backend_name(config)} "
            "backend runs the Kueue it was built or installed with"
        )
    return str(chosen)


@pytest.fixture(scope="module")
async def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Any]:
    """One installation per module, shared by its scenarios (each starts with ``reset``)."""
    name = backend_name(request.config)
    if name == "kind":
        from e2e_kind_backend import KindBackend, unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            pytest.skip(f"kind backend: {reason}")
        async with KindBackend() as kind:
            yield kind
        return
    if name == "real":
        from e2e_real_backend import RealBackend

        from dispatcher.sandbox.testkit import require_real_backend

        require_real_backend()
        async with RealBackend(tmp_path_factory.mktemp("e2e-real")) as real:
            yield real
        return
    from e2e_sandbox_backend import SandboxBackend

    crds: Path = request.getfixturevalue("crds_dir")
    version = kueue_version(request.config)
    async with SandboxBackend(tmp_path_factory.mktemp("e2e"), crds, version) as sandbox:
        yield sandbox
