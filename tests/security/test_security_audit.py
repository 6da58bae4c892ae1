"""Issue 8, security: "dependency audit (pip-audit or equivalent) in CI, failing on known
vulnerabilities".

``make test`` (what CI runs) ends with ``make audit``, which runs .ci/audit.py: pip-audit on the
venv, editable installs skipped, then a latest-release fallback (the index's package-level JSON
document) for the dependencies pip-audit could not audit. The real services cannot be reached
from every machine, so the verdicts are checked here offline: a stand-in ``pip_audit`` module
answers as pip-audit does (its JSON report, its exit status, its connection error), and a stub
HTTP server on loopback stands in for the index's JSON API (AUDIT_INDEX_URL).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PIP_AUDIT = """
import json, sys
args = sys.argv[1:]
output = args[args.index("--output") + 1]
mode = {mode!r}
if mode == "unreachable":
    print("requests.exceptions.ConnectionError: Failed to resolve 'vulns.invalid'", file=sys.stderr)
    sys.exit(1)
if mode == "crash":
    print("ValueError: something else", file=sys.stderr)
    sys.exit(2)
json.dump({{"dependencies": {dependencies!r}, "fixes": []}}, open(output, "w"))
sys.exit(1 if any(d.get("vulns") for d in {dependencies!r}) else 0)
"""


class StubIndex:
    """The index's package-level JSON API (``/pypi/<name>/json``) on loopback: ``pages`` maps a
    project name to (HTTP status, body); any other name answers 404. ``asked`` records the
    names requested."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, bytes]] = {}
        self.asked: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                name = parts[1] if len(parts) == 3 and parts[0] == "pypi" else ""
                index.asked.append(name)
                status, body = index.pages.get(name, (404, b'{"message": "Not Found"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/pypi"

    def project(self, name: str, latest: str, vulns: list[dict[str, Any]]) -> None:
        document = {"info": {"name": name, "version": latest}, "vulnerabilities": vulns}
        self.pages[name] = (200, json.dumps(document).encode())


@pytest.fixture
def index() -> Iterator[StubIndex]:
    stub = StubIndex()
    thread = threading.Thread(target=stub.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.server.shutdown()
        stub.server.server_close()
        thread.join(timeout=10)


def skipped(name: str, version: str) -> dict[str, Any]:
    """A dependency pip-audit could not audit, as its JSON report says it."""
    reason = f"Dependency not found on PyPI and could not be audited: {name} ({version})"
    return {"name": name, "skip_reason": reason}


def advisory(ident: str, fixed: list[str], aliases: list[str], withdrawn: Any = None) -> Any:
    """One entry of the package-level ``vulnerabilities`` list."""
    return {
        "id": ident,
        "aliases": aliases,
        "fixed_in": fixed,
        "summary": "stand-in advisory",
        "withdrawn": withdrawn,
        "link": "https://advisories.invalid/" + ident,
        "source": "osv",
    }


CLEAN = {"name": "pyyaml", "version": "6.0.4", "vulns": []}
EDITABLE = {"name": "multikueue-dispatcher", "skip_reason": "distribution marked as editable"}
VULNERABLE = {
    "name": "aiohttp",
    "version": "3.9.0",
    "vulns": [{"id": "GHSA-test-0001", "fix_versions": ["3.9.4"], "aliases": []}],
}
ADVISORY = advisory("GHSA-fake-0002", ["2.10.0", "2.9.1"], ["CVE-2099-0002"])
WITHDRAWN = advisory("GHSA-fake-0003", ["9.9"], [], withdrawn="2099-01-01T00:00:00Z")


@dataclass
class Case:
    mode: str = "report"  # the stand-in pip-audit: "report", "unreachable" or "crash"
    dependencies: list[dict[str, Any]] = field(default_factory=list)
    # name -> (latest release, vulnerabilities) or (HTTP status, body) when the first is an int
    projects: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    strict: bool = False
    status: int = 0
    summary: str = ""  # the summary line (the last line of the output) starts with this
    shows: list[str] = field(default_factory=list)
    hides: list[str] = field(default_factory=list)
    constraints: str = ""
    args: list[str] = field(default_factory=list)  # AUDIT_ARGS, passed on to pip-audit


CASES = {
    "pip-audit-clean": Case(
        dependencies=[CLEAN, EDITABLE],
        summary="audit: 1 dependencies, 1 audited (pip-audit 1, latest-release fallback 0), "
        "0 vulnerable, 0 not audited",
        shows=["skipped 1 editable installs (this project and plugins): multikueue-dispatcher"],
    ),
    "pip-audit-vulnerable": Case(
        dependencies=[CLEAN, VULNERABLE],
        status=1,
        summary="audit: 2 dependencies, 2 audited (pip-audit 2, latest-release fallback 0), "
        "1 vulnerable, 0 not audited",
        shows=["VULNERABLE aiohttp 3.9.0: GHSA-test-0001 (fixed in: 3.9.4) [pip-audit]"],
    ),
    "latest-and-clean": Case(
        dependencies=[CLEAN, EDITABLE, skipped("fake-a", "1.2")],
        projects={"fake-a": ("1.2.0", [WITHDRAWN])},
        summary="audit: 2 dependencies, 2 audited (pip-audit 1, latest-release fallback 1), "
        "0 vulnerable, 0 not audited",
        hides=["GHSA-fake-0003", "VULNERABLE"],
    ),
    "latest-and-vulnerable": Case(
        dependencies=[CLEAN, skipped("Fake_B", "2.0.0")],
        projects={"fake-b": ("2.0.0", [ADVISORY, WITHDRAWN])},
        status=1,
        summary="audit: 2 dependencies, 2 audited (pip-audit 1, latest-release fallback 1), "
        "1 vulnerable, 0 not audited",
        shows=[
            "VULNERABLE Fake_B 2.0.0: GHSA-fake-0002 [aliases: CVE-2099-0002] "
            "(fixed in: 2.9.1, 2.10.0) [fallback]"
        ],
        hides=["GHSA-fake-0003"],
    ),
    "latest-and-vulnerable-ignored": Case(
        dependencies=[skipped("fake-b", "2.0.0")],
        projects={"fake-b": ("2.0.0", [ADVISORY])},
        args=["--ignore-vuln", "CVE-2099-0002"],
        summary="audit: 1 dependencies, 1 audited (pip-audit 0, latest-release fallback 1), "
        "0 vulnerable, 0 not audited",
        hides=["GHSA-fake-0002"],
    ),
    "older-than-latest": Case(
        dependencies=[CLEAN, skipped("fake-c", "1.0.0")],
        projects={"fake-c": ("1.1.0", [ADVISORY])},
        summary="audit: 2 dependencies, 1 audited (pip-audit 1, latest-release fallback 0), "
        "0 vulnerable, 1 not audited (1 older than the latest release)",
        shows=["not audited: fake-c 1.0.0: older than the latest release, which is 1.1.0"],
        hides=["GHSA-fake-0002", "capped"],
    ),
    "older-than-latest-capped": Case(
        dependencies=[skipped("fake-c", "1.0.0")],
        projects={"fake-c": ("1.1.0", [])},
        constraints="# a cap\nfake-c<=1.0.0  # here\n",
        summary="audit: 1 dependencies, 0 audited",
        shows=["which is 1.1.0 (capped by a pip constraint: fake-c<=1.0.0)"],
    ),
    "older-than-latest-strict": Case(
        dependencies=[CLEAN, skipped("fake-c", "1.0.0")],
        projects={"fake-c": ("1.1.0", [])},
        strict=True,
        status=1,
        summary="audit: 2 dependencies, 1 audited (pip-audit 1, latest-release fallback 0), "
        "0 vulnerable, 1 not audited (1 older than the latest release)",
        shows=["AUDIT_STRICT=1: dependencies that could not be audited fail"],
    ),
    "newer-than-latest": Case(
        dependencies=[skipped("fake-d", "3.0.0rc1")],
        projects={"fake-d": ("2.9.0", [ADVISORY])},
        summary="audit: 1 dependencies, 0 audited (pip-audit 0, latest-release fallback 0), "
        "0 vulnerable, 1 not audited (1 not a release the index calls latest)",
        shows=["fake-d 3.0.0rc1: not a release the index calls latest, which is 2.9.0"],
        hides=["GHSA-fake-0002"],
    ),
    "lookup-error": Case(
        dependencies=[CLEAN, skipped("fake-e", "1.0"), skipped("fake-f", "1.0")],
        projects={"fake-f": (200, b"<html>not json</html>")},
        summary="audit: 3 dependencies, 1 audited (pip-audit 1, latest-release fallback 0), "
        "0 vulnerable, 2 not audited (2 lookup failed)",
        shows=[
            "not audited: fake-e 1.0: lookup failed, HTTP 404",
            "not audited: fake-f 1.0: lookup failed, unexpected answer",
        ],
    ),
    "lookup-error-strict": Case(
        dependencies=[CLEAN, skipped("fake-e", "1.0")],
        projects={"fake-e": (503, b"{}")},
        strict=True,
        status=1,
        summary="audit: 2 dependencies, 1 audited",
        shows=["fake-e 1.0: lookup failed, HTTP 503", "AUDIT_STRICT=1"],
    ),
    "version-unknown": Case(
        dependencies=[{"name": "ghost-package-not-installed", "skip_reason": "odd"}],
        summary="audit: 1 dependencies, 0 audited (pip-audit 0, latest-release fallback 0), "
        "0 vulnerable, 1 not audited (1 installed version unknown)",
    ),
    "unreachable-fallback": Case(
        mode="unreachable",
        projects={"pyyaml": ("<installed pyyaml>", [])},
        summary="audit: ",
        shows=[
            "service is unreachable",
            "audited (pip-audit 0, latest-release fallback 1), 0 vulnerable",
            "lookup failed",
        ],
    ),
    "unreachable-strict": Case(
        mode="unreachable", strict=True, status=1, summary="audit: ", shows=["AUDIT_STRICT=1"]
    ),
    "other-failure": Case(mode="crash", status=1, shows=["pip-audit failed (exit 2)"]),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_audit_verdicts(tmp_path: Path, index: StubIndex, case: Case) -> None:
    """Issue 8, security: the audit fails on a known vulnerability (naming the package, the
    advisory, its aliases and the fixed versions), whether pip-audit found it or the
    latest-release fallback did (only when the installed version is the latest release: the
    package-level list describes that release alone); an older or unlisted version, or a failed
    lookup, counts as not audited with its reason, which fails only with AUDIT_STRICT=1; any
    other pip-audit failure fails."""
    fake = tmp_path / "pip_audit"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        FAKE_PIP_AUDIT.format(mode=case.mode, dependencies=case.dependencies)
    )
    for name, (first, second) in case.projects.items():
        if isinstance(first, int):
            index.pages[name] = (first, second)
        else:
            latest = importlib.metadata.version(name) if first.startswith("<") else first
            index.project(name, latest, second)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "AUDIT_STRICT": "1" if case.strict else "0",
        "AUDIT_INDEX_URL": index.url,
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    if case.constraints:
        constraints = tmp_path / "constraints.txt"
        constraints.write_text(case.constraints)
        env["PIP_CONSTRAINT"] = str(constraints)
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "audit.py"), *case.args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == case.status, output
    if case.summary:
        assert result.stdout.splitlines()[-1].startswith(case.summary), output
    for text in case.shows:
        assert text in output, text
    for text in case.hides:
        assert text not in output, text
    if case.mode == "report":
        expected = {
            d["name"].lower().replace("_", "-")
            for d in case.dependencies
            if "skip_reason" in d and "editable" not in d["skip_reason"] and "(" in d["skip_reason"]
        }
        assert sorted(index.asked) == sorted(expected), "only what pip-audit skipped is looked up"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_runs_the_audit_on_the_venv() -> None:
    """Issue 8, security: "dependency audit in CI": CI runs ``make test``, which runs the
    audit (pip-audit, installed by the test extra, on the project's venv)."""
    result = subprocess.run(
        ["make", "-n", "test"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert ".venv/bin/python .ci/audit.py" in result.stdout
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make PYTHON=" in ci
    assert " test" in ci.splitlines()[-1]
    extra = json.dumps(_test_extra())
    assert "pip-audit" in extra


def _test_extra() -> list[str]:
    import tomllib

    # The test tools come with the test world's `test` extra (sandbox/pyproject.toml).
    data = tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text())
    extra: list[str] = data["project"]["optional-dependencies"]["test"]
    return extra
