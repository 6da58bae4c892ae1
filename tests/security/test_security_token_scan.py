"""Issue 8, security: "a test scans all log output of the suite for every token the fake
issued". The scan itself (tests/conftest.py) is checked here: it finds each form a credential
takes in a log line, and a leak fails a pytest session that otherwise passed, naming the logger
and the message without printing the token."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher_sandbox.fake_apiserver.server import ISSUED_CREDENTIALS, FakeCluster
from dispatcher_sandbox.fake_apiserver.tls import new_ca

ROOT = Path(__file__).resolve().parents[2]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _kubeconfig_text(cluster: FakeCluster) -> str:
    return yaml.safe_dump(cluster.kubeconfig)


CLUSTER = FakeCluster("scan-forms")
KEY = new_ca().key_pem.decode()
FORMS = [
    pytest.param(lambda: f"connecting with {CLUSTER.token}", id="plain-token"),
    pytest.param(lambda: f"token prefix {CLUSTER.token[:20]}", id="token-prefix-20"),
    pytest.param(lambda: f"data: {_b64(_kubeconfig_text(CLUSTER))}", id="secret-data"),
    pytest.param(
        lambda: f'"kubeconfig": "{_b64("x" + _kubeconfig_text(CLUSTER))}"',
        id="secret-data-shifted-1",
    ),
    pytest.param(lambda: f"{_b64('xy' + _kubeconfig_text(CLUSTER))}", id="secret-data-shifted-2"),
    pytest.param(lambda: KEY.replace("\n", "\\n"), id="pem-key-json-escaped"),
    pytest.param(lambda: f"client-key-data: {_b64(KEY)}", id="pem-key-base64"),
    pytest.param(lambda: f"client-key-data: {_b64('#' + KEY)}", id="pem-key-base64-shifted"),
]


@pytest.mark.parametrize("text", FORMS)
def test_the_scan_finds_each_form_of_a_credential(text: Any, token_scan: Any) -> None:
    """A token plain, truncated to 20 characters, base64 inside Secret data at each alignment;
    a private key in its PEM text (JSON-escaped) or base64-encoded."""
    secrets = {"token": CLUSTER.token, "key": KEY}
    assert token_scan.search([text()], secrets)
    assert not token_scan.search([text()], {"other": FakeCluster("scan-other").token})


def test_the_sandbox_registers_what_it_mints() -> None:
    """Issue 8, security: every credential a fake cluster mints is registered for the scan:
    its bearer token (the admin endpoint's too), its serving key and the shared CA key."""
    cluster = FakeCluster("scan-registered")
    registered = {(c.kind, c.value) for c in ISSUED_CREDENTIALS}
    assert ("token", cluster.token) in registered
    assert {kind for kind, _ in registered} >= {"token", "serving-key", "ca-key"}


LEAKY_TESTS = """
import logging
from pathlib import Path

from dispatcher_sandbox.fake_apiserver.server import FakeCluster

CLUSTER = FakeCluster("leaky")
Path(__file__).with_name("token.txt").write_text(CLUSTER.token)
log = logging.getLogger("dispatcher.clusters.registry")


def test_leaks_a_token():
    log.warning("connecting to %s with %s", CLUSTER.name, CLUSTER.token)


def test_logs_a_bearer_header_that_redaction_removes():
    log.warning("request headers: Authorization: Bearer %s", CLUSTER.token)


def test_logs_nothing_secret():
    log.warning("worker %s connected", CLUSTER.name)
"""


def test_a_leaked_token_fails_a_passing_session(tmp_path: Path) -> None:
    """Issue 8, security: a token in a written log line fails the session (exit 1) although
    every test passed; the report names the logger and the message with the token masked. A
    token the production redaction removes is only reported."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaky.py").write_text(LEAKY_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    print(output)
    assert "3 passed" in output
    assert result.returncode == 1
    assert "1 leaks" in output
    [leak] = [line for line in output.splitlines() if line.startswith("TOKEN LEAK:")]
    assert "token of leaky written" in leak
    assert "logger 'dispatcher.clusters.registry'" in leak
    assert "connecting to leaky with" in leak
    assert "…[masked]" in leak
    assert "1 record(s) carried a credential that the production redaction removed" in output
    token = (tmp_path / "token.txt").read_text()
    assert token not in output
    assert token[:4] + "…[masked]" in leak
