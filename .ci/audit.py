"""`make audit`: known vulnerabilities in the installed dependencies (issue 8, security).

Runs pip-audit on the virtual environment this interpreter belongs to, skipping the packages
installed in editable mode (the project itself and the local plugins under plugins/).

pip-audit asks the package index about each installed version; where the index does not answer
for a version (or pip-audit cannot reach its service at all), a fallback asks the index's
package-level JSON document (``<index>/<name>/json``). That document's ``vulnerabilities`` list
describes the latest release only, so it is used only when the installed version *is* the latest
release; any other dependency is counted as not audited, with the reason (older than the latest
release, which is X; the lookup failed; ...).

The last line is the summary::

    audit: N dependencies, A audited (pip-audit P, latest-release fallback F), V vulnerable,
    U not audited (reasons)

Exit status 1 when any dependency has a known vulnerability (each advisory is listed with its
aliases and fixed versions), when pip-audit fails for another reason than reaching its service,
and, with AUDIT_STRICT=1, when any dependency could not be audited.

Environment: AUDIT_STRICT=1 (see above); AUDIT_INDEX_URL overrides the base of the index's JSON
API (default: pip's own default index, read from pip at run time). Extra arguments are passed to
pip-audit (for example ``-s osv`` to use the OSV service).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

CONNECTION_ERRORS = ("ConnectionError", "Connection error", "Failed to resolve", "timed out")
LOOKUP_TIMEOUT = 10.0  # seconds, per package-level lookup
LOOKUP_THREADS = 16
VERSION_IN_SKIP_REASON = re.compile(r"\(([^()\s]+)\)\s*$")


@dataclass
class Result:
    """The audit of one installed, non-editable distribution."""

    name: str
    version: str
    source: str = ""  # "pip-audit" or "fallback" when audited, "" when not
    vulns: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""  # why it was not audited (a category, for the summary)
    detail: str = ""  # the specifics (the latest release, the HTTP status, ...)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_url() -> str | None:
    """Base of the index's JSON API: AUDIT_INDEX_URL, else pip's default index."""
    override = os.environ.get("AUDIT_INDEX_URL")
    if override:
        return override.rstrip("/")
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        return None
    return str(PyPI.pypi_url).rstrip("/")


def same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def older(a: str, b: str) -> bool:
    try:
        return Version(a) < Version(b)
    except InvalidVersion:
        return False


def python_satisfies(requires_python: str) -> bool:
    running = ".".join(str(part) for part in sys.version_info[:3])
    try:
        return SpecifierSet(requires_python).contains(running)
    except InvalidSpecifier:
        return True


def sorted_versions(versions: list[str]) -> list[str]:
    try:
        return sorted(versions, key=Version)
    except InvalidVersion:
        return sorted(versions)


def ignored_ids(argv: list[str]) -> set[str]:
    """The advisories pip-audit is told to ignore (``--ignore-vuln ID``): the fallback ignores
    them too."""
    ids = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--ignore-vuln"}
    ids.update(arg.split("=", 1)[1] for arg in argv if arg.startswith("--ignore-vuln="))
    return ids


def lookup(
    base: str, name: str, version: str, ignored: set[str] | frozenset[str] = frozenset()
) -> Result:
    """The latest-release fallback for one dependency."""
    url = f"{base}/{canonical(name)}/json"
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": "multikueue-dispatcher-audit"}
    )
    try:
        with urllib.request.urlopen(request, timeout=LOOKUP_TIMEOUT) as response:
            document = json.load(response)
        latest = str(document["info"]["version"])
        listed = document.get("vulnerabilities") or []
        if not isinstance(listed, list):
            raise TypeError("vulnerabilities is not a list")
    except urllib.error.HTTPError as error:
        return Result(name, version, reason="lookup failed", detail=f"HTTP {error.code}")
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return Result(name, version, reason="lookup failed", detail=str(reason))
    except (ValueError, KeyError, TypeError) as error:
        return Result(name, version, reason="lookup failed", detail=f"unexpected answer: {error}")
    if not same_version(version, latest):
        if older(version, latest):
            reason = "older than the latest release"
        else:
            reason = "not a release the index calls latest"
        detail = f"which is {latest}"
        needs = str(document["info"].get("requires_python") or "")
        if needs and not python_satisfies(needs):
            detail += f" and requires Python {needs}"
        return Result(name, version, reason=reason, detail=detail)
    vulns = [
        {
            "id": str(entry.get("id", "?")),
            "aliases": [str(a) for a in entry.get("aliases") or []],
            "fix_versions": [str(v) for v in entry.get("fixed_in") or []],
        }
        for entry in listed
        if isinstance(entry, dict)
        and entry.get("withdrawn") is None
        and not ignored & {str(entry.get("id")), *map(str, entry.get("aliases") or [])}
    ]
    return Result(name, version, source="fallback", vulns=vulns)


def installed_versions() -> dict[str, str]:
    """canonical name -> version of the installed, non-editable distributions (as pip lists
    them, which is what pip-audit --local --skip-editable audits)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "list",
        "--local",
        "--exclude-editable",
        "--format",
        "json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return {}
    return {canonical(d["name"]): d["version"] for d in json.loads(result.stdout)}


def constraint_caps() -> dict[str, str]:
    """canonical name -> line, from the pip constraint files in force (best effort): an
    installed version older than the latest release is often just capped there."""
    paths: list[str] = []
    try:
        from pip._internal.configuration import Configuration

        configuration = Configuration(isolated=False)
        configuration.load()
        # (file, {section.key: value}) in increasing precedence, the environment last: the
        # last constraint setting is the one pip uses
        for _, values in configuration.items():
            for key, value in dict(values).items():
                if key.split(".")[0] in ("global", "install", ":env:") and key.endswith(
                    ".constraint"
                ):
                    paths = str(value).split()
    except Exception:  # pip's configuration is internal: this is a note, not a verdict
        paths.extend(os.environ.get("PIP_CONSTRAINT", "").split())
    caps: dict[str, str] = {}
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            text = line.split("#", 1)[0].strip()
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)
            if match:
                caps[canonical(match.group(0))] = text
    return caps


def run_pip_audit(argv: list[str]) -> tuple[int, list[dict[str, Any]] | None, str]:
    """Run pip-audit: (its exit status, its dependencies or None when it could not reach its
    service, its stderr)."""
    with tempfile.TemporaryDirectory(prefix="pip-audit-") as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip_audit",
            "--local",
            "--skip-editable",
            "--progress-spinner",
            "off",
            "--format",
            "json",
            "--output",
            str(report),
            *argv,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if not report.exists():
            return result.returncode, None, result.stderr
        dependencies: list[dict[str, Any]] = json.loads(report.read_text())["dependencies"]
        return result.returncode, dependencies, result.stderr


def main(argv: list[str]) -> int:
    strict = os.environ.get("AUDIT_STRICT") == "1"
    status, dependencies, stderr = run_pip_audit(argv)
    tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
    results: list[Result] = []
    pending: list[tuple[str, str | None]] = []  # (name, version) for the fallback
    if dependencies is None:
        if not any(marker in stderr for marker in CONNECTION_ERRORS):
            print(stderr[-3000:], file=sys.stderr)
            print(f"pip-audit failed (exit {status}): {tail}")
            return 1
        print(f"pip-audit: the vulnerability service is unreachable: {tail}")
        pending = [(name, version) for name, version in sorted(installed_versions().items())]
        editable: list[dict[str, Any]] = []
    else:
        if status not in (0, 1):
            print(stderr[-3000:], file=sys.stderr)
            print(f"pip-audit failed (exit {status}): {tail}")
            return 1
        editable = [d for d in dependencies if "editable" in d.get("skip_reason", "")]
        for dependency in dependencies:
            if dependency in editable:
                continue
            if "skip_reason" not in dependency:
                results.append(
                    Result(
                        dependency["name"],
                        dependency["version"],
                        source="pip-audit",
                        vulns=dependency.get("vulns") or [],
                    )
                )
                continue
            match = VERSION_IN_SKIP_REASON.search(dependency["skip_reason"])
            pending.append((dependency["name"], match.group(1) if match else None))
    if any(version is None for _, version in pending):
        versions = installed_versions()
        pending = [(n, v or versions.get(canonical(n))) for n, v in pending]
    base = index_url()
    to_look_up: list[tuple[str, str]] = []
    for name, version in pending:
        if version is None:
            results.append(Result(name, "?", reason="installed version unknown"))
        elif base is None:
            results.append(Result(name, version, reason="no index URL (set AUDIT_INDEX_URL)"))
        else:
            to_look_up.append((name, version))
    if to_look_up and base is not None:
        ignored = ignored_ids(argv)
        with ThreadPoolExecutor(max_workers=LOOKUP_THREADS) as pool:
            results.extend(pool.map(lambda nv: lookup(base, *nv, ignored), to_look_up))
    return report(results, editable, strict)


def report(results: list[Result], editable: list[dict[str, Any]], strict: bool) -> int:
    results.sort(key=lambda r: canonical(r.name))
    audited = [r for r in results if r.source]
    vulnerable = [r for r in audited if r.vulns]
    unaudited = [r for r in results if not r.source]
    for result in vulnerable:
        for vuln in result.vulns:
            fixed = ", ".join(sorted_versions(vuln.get("fix_versions") or [])) or "none yet"
            aliases = ", ".join(vuln.get("aliases") or [])
            print(
                f"VULNERABLE {result.name} {result.version}: {vuln['id']}"
                + (f" [aliases: {aliases}]" if aliases else "")
                + f" (fixed in: {fixed}) [{result.source}]"
            )
    caps = constraint_caps() if unaudited else {}
    for result in unaudited:
        cap = caps.get(canonical(result.name))
        print(
            f"not audited: {result.name} {result.version}: {result.reason}"
            + (f", {result.detail}" if result.detail else "")
            + (f" (capped by a pip constraint: {cap})" if cap else "")
        )
    if editable:
        names = ", ".join(sorted(d["name"] for d in editable))
        print(
            f"audit: skipped {len(editable)} editable installs (this project and plugins): {names}"
        )
    if strict and unaudited:
        print("audit: AUDIT_STRICT=1: dependencies that could not be audited fail")
    reasons = Counter(r.reason for r in unaudited)
    why = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    by_pip_audit = sum(r.source == "pip-audit" for r in audited)
    print(
        f"audit: {len(results)} dependencies, {len(audited)} audited (pip-audit {by_pip_audit}, "
        f"latest-release fallback {len(audited) - by_pip_audit}), {len(vulnerable)} vulnerable, "
        f"{len(unaudited)} not audited" + (f" ({why})" if why else "")
    )
    return 1 if vulnerable or (strict and unaudited) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
