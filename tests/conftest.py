"""Fixtures shared by every test: the anyio backend and the real Kueue CRDs; session hooks:
the Kueue emulation's rejected writes, and the token-leak scan of every log record (issue 8,
security)."""

from __future__ import annotations

import base64
import contextlib
import copy
import logging
import os
import re
import traceback
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dispatcher.algorithms import stages
from dispatcher_sandbox.kueue_crds import ENV_VAR, kueue_crds_dir


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
    from dispatcher_sandbox.fake_apiserver.server import REJECTIONS

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
    """Report the emulation's rejected writes over the whole session (expected: zero), and the
    token scan's figures and leaks."""
    _report_token_scan(terminalreporter)
    from dispatcher_sandbox.fake_apiserver.server import REJECTIONS

    emulator = [r for r in REJECTIONS if r.user_agent.startswith(EMULATOR_AGENT)]
    provoked = sum(1 for r in emulator if r.expected)
    terminalreporter.write_line(
        f"Kueue emulation writes rejected with 422: {len(emulator) - provoked} unexpected, "
        f"{provoked} provoked on purpose; all 422 answers in the session: {len(REJECTIONS)}"
    )


# --- token-leak scan (issue 8, security: "a test scans all log output of the suite for every
# token the fake issued") ----------------------------------------------------------------------
#
# A root handler, installed for the whole session, formats every log record as the production
# handler does (``RedactionFilter`` then ``JsonFormatter``, with exception text and extras) and
# scans the line for every credential the sandbox minted (``ISSUED_CREDENTIALS``: bearer tokens,
# the CA key, serving keys), plain or base64-encoded (as in a Secret's data). A credential is
# registered when its fake cluster is created, before anyone can log it, so scanning each line
# as it is emitted sees every leak. Any hit fails the session.
#
# ``configure_logging`` (called at every ``run_manager`` start) replaces only its own handler;
# tests that restore the root handlers might drop ours, so it is re-attached before and after
# every test (``reattached`` counts how often that was needed).

GRAM = 16  # a credential shows when any 16 characters of one of its forms appear in a line
_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{GRAM},}}")


def _base64_forms(data: bytes) -> list[str]:
    """The base64 text ``data`` becomes inside any larger base64-encoded content: one form per
    alignment (0, 1, 2 bytes before it), keeping only the characters ``data`` alone decides."""
    forms = []
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + data + b"\0\0").decode()
        first = -(-8 * pad // 6)
        last = (8 * (pad + len(data)) - 6) // 6
        forms.append(encoded[first : last + 1])
    return forms


def _private_key_forms(pem: str) -> list[str]:
    """Text forms of an EC private key's secret scalar: its characters in the PEM body (split at
    the line breaks) and the base64 of that stretch of PEM text (a key inside a kubeconfig's
    ``client-key-data`` or a Secret). The key's public half is left out: certificates carry it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    scalar = key.private_numbers().private_value.to_bytes(32, "big")
    lines = pem.splitlines(keepends=True)
    body = "".join(line.strip() for line in lines[1:-1])
    start = base64.b64decode(body).find(scalar)
    assert start >= 0
    first, last = -(-8 * start // 6), (8 * (start + len(scalar)) - 6) // 6
    width = len(lines[1].strip())  # PEM lines: `width` characters and a newline

    def offset(char: int) -> int:
        return len(lines[0]) + char + char // width

    stretch = pem[offset(first) : offset(last) + 1]
    return [p for p in stretch.split("\n") if p] + _base64_forms(stretch.encode())


def credential_forms(value: str) -> list[str]:
    """Every text form of a credential the scan looks for (tokens: the token and its base64)."""
    if "PRIVATE KEY-----" in value:
        return _private_key_forms(value)
    return [value, *_base64_forms(value.encode())]


@dataclass(frozen=True)
class Leak:
    """A log line that carried (some of) a credential."""

    credential: str  # kind and cluster, never the value
    logger: str
    message: str  # with the credential masked
    redacted: bool  # found in the line the production handler writes (else only in the record)

    def __str__(self) -> str:
        where = "written" if self.redacted else "in the record before redaction"
        return f"{self.credential} {where}: logger {self.logger!r}, message {self.message!r}"


@dataclass
class CredentialIndex:
    """Windows of ``GRAM`` characters of credentials' forms, for scanning text in one pass."""

    grams: dict[str, str] = field(default_factory=dict)  # window -> credential label
    labels: list[str] = field(default_factory=list)
    skipped: int = 0  # too short to scan without false alarms

    def add(self, label: str, value: str) -> None:
        forms = [f for f in credential_forms(value) if len(f) >= GRAM]
        if not forms:
            self.skipped += 1
            return
        self.labels.append(label)
        for form in forms:
            for i in range(len(form) - GRAM + 1):
                self.grams.setdefault(form[i : i + GRAM], label)

    def find(self, text: str) -> tuple[set[str], str]:
        """The credentials seen in ``text``, and ``text`` with each run holding one masked."""
        found: set[str] = set()
        masked = text
        for run in _RUN.finditer(text):
            chunk = run.group(0)
            for i in range(len(chunk) - GRAM + 1):
                label = self.grams.get(chunk[i : i + GRAM])
                if label is not None:
                    found.add(label)
                    masked = masked.replace(chunk, chunk[:4] + "…[masked]")
                    break
        return found, masked


class TokenScan(logging.Handler):
    """The session's capture: scans every record (see the comment above)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        from dispatcher.logs import JsonFormatter, RedactionFilter

        self.json = JsonFormatter()
        self.redaction = RedactionFilter()
        self.index = CredentialIndex()
        self.registered = 0  # how many of ISSUED_CREDENTIALS are in the index
        self.records = 0
        self.by_logger: dict[str, int] = {}
        self.leaks: list[Leak] = []
        self.raw_only: list[Leak] = []
        self.errors: list[str] = []
        self.reattached = 0
        self.sinks: list[list[tuple[str, str]]] = []

    def _refresh(self) -> None:
        from dispatcher_sandbox.fake_apiserver.server import ISSUED_CREDENTIALS

        while self.registered < len(ISSUED_CREDENTIALS):
            issued = ISSUED_CREDENTIALS[self.registered]
            self.index.add(f"{issued.kind} of {issued.cluster}", issued.value)
            self.registered += 1

    def written(self, record: logging.LogRecord) -> str:
        """``record`` as the production JSON handler writes it (on a copy: the record itself is
        left for the other handlers as it was)."""
        redacted = copy.copy(record)
        self.redaction.filter(redacted)
        return self.json.format(redacted)

    def emit(self, record: logging.LogRecord) -> None:
        # Redaction only removes text, so a credential in the written line is in the unredacted
        # one too: scan that first, and format the written line only when it is needed.
        try:
            self._refresh()
            raw = self.json.format(copy.copy(record))
            self.records += 1
            self.by_logger[record.name] = self.by_logger.get(record.name, 0) + 1
            found, _ = self.index.find(raw)
            written = self.written(record) if found or self.sinks else ""
            for sink in self.sinks:
                sink.append((record.name, written))
            if found:
                leaked, masked = self.index.find(written)
                self.leaks.extend(Leak(c, record.name, masked[:500], True) for c in sorted(leaked))
                masked = self.index.find(raw)[1]
                self.raw_only.extend(
                    Leak(c, record.name, masked[:500], False) for c in sorted(found - leaked)
                )
        except Exception as error:  # never break the logging of the code under test
            self.errors.append(f"{type(error).__name__}: {error}")

    def attach(self) -> None:
        """Put the capture first among the root handlers (before the production handler's
        redaction changes records in place) unless it is there already."""
        root = logging.getLogger()
        if self not in root.handlers:
            root.handlers.insert(0, self)
            self.reattached += 1

    @contextlib.contextmanager
    def collect(self) -> Iterator[list[tuple[str, str]]]:
        """The (logger, written line) of every record emitted inside the block."""
        sink: list[tuple[str, str]] = []
        self.sinks.append(sink)
        try:
            yield sink
        finally:
            self.sinks.remove(sink)

    def search(self, lines: Iterable[str], secrets: dict[str, str]) -> list[str]:
        """Which of ``secrets`` (label -> value) show in ``lines``: a separate index, so a test
        can look for credentials the sandbox did not issue (a wrong token, Secret data)."""
        index = CredentialIndex()
        for label, value in secrets.items():
            index.add(label, value)
        assert not index.skipped, "secrets shorter than the scan window"
        found: set[str] = set()
        for line in lines:
            found |= index.find(line)[0]
        return sorted(found)

    def summary(self) -> str:
        self._refresh()
        kinds: dict[str, int] = {}
        from dispatcher_sandbox.fake_apiserver.server import ISSUED_CREDENTIALS

        for issued in ISSUED_CREDENTIALS:
            kinds[issued.kind] = kinds.get(issued.kind, 0) + 1
        detail = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        return (
            f"token scan: {self.records} log records, {kinds.get('token', 0)} tokens issued "
            f"({len(ISSUED_CREDENTIALS)} credentials: {detail or 'none'}), "
            f"{len(self.leaks)} leaks; {len(self.raw_only)} record(s) carried a credential that "
            f"the production redaction removed; capture re-attached {self.reattached} time(s)"
        )


_SCAN_KEY = pytest.StashKey[TokenScan]()


def _name_unclosed_sessions() -> None:
    """Make an unclosed aiohttp session say where it was opened.

    An unclosed ``ClientSession`` is reported by the garbage collector, often during a later
    test, as a bare ResourceWarning ("Enable tracemalloc ..."; tracemalloc makes the sandbox
    tests too slow to run). Each session records the test that opened it and the project
    frames of its creation; an unclosed one warns with both, then aiohttp warns as usual.
    """
    init, finalize = aiohttp.ClientSession.__init__, aiohttp.ClientSession.__del__
    root = str(Path(__file__).resolve().parents[1])

    def recording_init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        frames = [
            f"{Path(f.filename).relative_to(root)}:{f.lineno} {f.name}"
            for f in traceback.extract_stack(limit=25)[:-1]
            if f.filename.startswith(root) and "/.venv/" not in f.filename
        ]
        self._opened_by = (os.environ.get("PYTEST_CURRENT_TEST", "?"), frames[-6:])  # type: ignore[attr-defined]
        init(self, *args, **kwargs)

    def naming_del(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        opened = getattr(self, "_opened_by", None)
        if opened is not None and not self.closed:
            test, frames = opened
            warnings.warn(
                f"Unclosed aiohttp ClientSession opened in {test} at "
                + " <- ".join(reversed(frames)),
                ResourceWarning,
                stacklevel=1,
            )
        finalize(self, *args, **kwargs)

    aiohttp.ClientSession.__init__ = recording_init  # type: ignore[method-assign]
    aiohttp.ClientSession.__del__ = naming_del  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    _name_unclosed_sessions()
    scan = TokenScan()
    scan.attach()
    scan.reattached = 0
    config.stash[_SCAN_KEY] = scan


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    scan = item.config.stash[_SCAN_KEY]
    scan.attach()
    try:
        return (yield)
    finally:
        scan.attach()


@pytest.fixture
def assignments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the flavor assignments the decision stages make (``[count]``)."""
    calls = [0]
    original = stages.assign_flavors

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stages, "assign_flavors", counted)
    return calls


@pytest.fixture(scope="session")
def token_scan(pytestconfig: pytest.Config) -> TokenScan:
    """The session's log capture and token scan (see ``TokenScan``)."""
    return pytestconfig.stash[_SCAN_KEY]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A credential in any log line fails the session, whatever the tests said."""
    scan = session.config.stash.get(_SCAN_KEY, None)
    if scan is not None and (scan.leaks or scan.errors):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _report_token_scan(terminalreporter: pytest.TerminalReporter) -> None:
    scan = terminalreporter.config.stash.get(_SCAN_KEY, None)
    if scan is None:
        return
    terminalreporter.write_line(scan.summary())
    if scan.leaks or scan.errors:
        terminalreporter.write_line(
            f"TOKEN SCAN FAILED: {len(scan.leaks)} log line(s) carried a credential the sandbox "
            f"issued, {len(scan.errors)} scan error(s); the session fails",
            red=True,
            bold=True,
        )
    for leak in scan.leaks[:20]:
        terminalreporter.write_line(f"TOKEN LEAK: {leak}", red=True, bold=True)
    for error in scan.errors[:5]:
        terminalreporter.write_line(f"TOKEN SCAN ERROR: {error}", red=True, bold=True)
    for leak in scan.raw_only[:5]:
        terminalreporter.write_line(f"token scan, redacted in time: {leak}")
