"""The scenario suite's backend: ``sandbox`` (default), ``real`` or ``kind``.

Choose with ``pytest tests/e2e --backend real`` or ``E2E_BACKEND=real``. The real backend is
skipped, with the reason, where its binaries are not built (``python -m
dispatcher_sandbox.real_kueue.build``), except under ``REQUIRE_REAL_BACKEND=1`` (CI), where that
fails. The kind backend is skipped, with the reason, where docker, kind or the clusters are
missing (``hack/kind-e2e.sh`` creates them and runs the suite).

Every test that uses the backend leaves its trace (``dispatcher_sandbox.harness.e2e.trace``:
what each Workload it submitted went through) in
``$MKD_TRACE_DIR/<backend>-<kueue version>/<test>.json`` (default ``build/traces`` under the
repository), for the differential comparison of the sandbox and real runs
(``scripts/differential.py``, ``make differential``, issue 14).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dispatcher_sandbox.harness.e2e.installations import Installations
from dispatcher_sandbox.harness.e2e.trace import (
    SETTLE_MAX,
    TRACE_FORMAT,
    recorder_of,
    trace_file_name,
)

BACKENDS = ("sandbox", "real", "kind")
KUEUE_VERSIONS = ("v0.19", "v0.20")
ROOT = Path(__file__).resolve().parents[2]
TRACE_DIR_ENV = "MKD_TRACE_DIR"
DEFAULT_TRACE_DIR = ROOT / "build" / "traces"
# Before a trace is written, the run is given time to come to rest, so that the final state
# is not caught in the middle of a write Kueue was about to make: until no watch event arrived
# for SETTLE_QUIET seconds and no finished Job has a remote copy left (TraceRecorder.unsettled),
# at most SETTLE_MAX seconds (the same on every backend). A quiet second alone cut the seeded
# mix on the sandbox before the copies of its last Jobs were removed in 11 of 24 runs (their
# removal waits for the worker clients' rate limit).
SETTLE_QUIET = 1.0


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


@pytest.fixture(scope="session")
async def installations() -> AsyncIterator[Installations]:
    """The session's shared installation (see :class:`Installations`), stopped at its end."""
    shared = Installations()
    try:
        yield shared
    finally:
        await shared.close()


@pytest.fixture(scope="module")
async def backend(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    installations: Installations,
) -> Any:
    """The installation of the module's scenarios (each starts with ``reset``): the session's
    shared one (:class:`Installations`)."""
    name = backend_name(request.config)
    # Called only when a new installation is started (its folder made then).
    start: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    if name == "kind":
        from dispatcher_sandbox.harness.e2e.kind_backend import KindBackend, unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            pytest.skip(f"kind backend: {reason}")
        start = KindBackend
    elif name == "real":
        from dispatcher_sandbox.harness.e2e.real_backend import RealBackend
        from dispatcher_sandbox.harness.scenario import require_real_backend

        require_real_backend()
        start = lambda: RealBackend(tmp_path_factory.mktemp("e2e-real"))  # noqa: E731
    else:
        from dispatcher_sandbox.harness.e2e.sandbox_backend import SandboxBackend

        crds: Path = request.getfixturevalue("crds_dir")
        version = kueue_version(request.config)
        start = lambda: SandboxBackend(tmp_path_factory.mktemp("e2e"), crds, version)  # noqa: E731
    own = request.node.get_closest_marker("own_installation") is not None
    return await installations.get(request.session.testsfailed, start, own=own)


# --- the differential trace (issue 14) --------------------------------------------------------

REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
SESSION_STARTED = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def trace_dir(config: pytest.Config) -> Path:
    """Where this run's traces go: ``$MKD_TRACE_DIR`` (else ``build/traces``), then
    ``<backend>-<kueue version>``."""
    base = Path(os.environ.get(TRACE_DIR_ENV) or DEFAULT_TRACE_DIR)
    return base / f"{backend_name(config)}-{kueue_version(config)}"


@functools.cache
def git_state() -> tuple[str, bool]:
    """The checked-out commit and whether tracked files differ from it (``unknown`` without
    git)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return commit, bool(changed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, Any]:
    """Keep each phase's report on the item, for the trace's test outcome."""
    report = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    return report


def outcome_of(item: pytest.Item) -> str:
    """``passed``, ``failed`` or ``skipped`` (the call), ``error`` when set-up failed."""
    reports = item.stash.get(REPORTS, {})
    call = reports.get("call")
    if call is None:
        setup = reports.get("setup")
        return "skipped" if setup is not None and setup.skipped else "error"
    return str(call.outcome)


@pytest.fixture(autouse=True)
def e2e_trace(request: pytest.FixtureRequest) -> None:
    """Every test that uses the backend leaves its trace (see the module docstring)."""
    if "backend" in request.fixturenames:
        request.getfixturevalue("e2e_trace_writer")


@pytest.fixture
async def e2e_trace_writer(request: pytest.FixtureRequest, backend: Any) -> AsyncIterator[None]:
    """Mark the start, and after the test write what was submitted since (the test's trace)."""
    recorder = recorder_of(backend)
    since = recorder.mark()
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    with anyio.move_on_after(SETTLE_MAX) as settling:
        while True:
            with anyio.move_on_after(SETTLE_QUIET) as quiet:
                await recorder.next_event()
            if quiet.cancelled_caught and not recorder.unsettled(since):
                break
    commit, dirty = git_state()
    trace = {
        "format": TRACE_FORMAT,
        "test": request.node.nodeid,
        "backend": backend_name(request.config),
        "kueueVersion": kueue_version(request.config),
        "commit": commit,
        "dirty": dirty,
        "session": SESSION_STARTED,
        "writtenAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "outcome": outcome_of(request.node),
        "seconds": round(took, 1),
        "settled": not settling.cancelled_caught,
        **recorder.export(since),
    }
    folder = trace_dir(request.config)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / trace_file_name(request.node.nodeid)
    path.write_text(json.dumps(trace, indent=1, sort_keys=True) + "\n")
