"""`make audit`: known vulnerabilities in the installed dependencies (issue 8, security).

Runs pip-audit on the virtual environment this interpreter belongs to, skipping the packages
installed in editable mode (the project itself and the local plugins under plugins/), and
prints one summary line. Exit status:

- 1 when pip-audit reports any known vulnerability (each is listed with its fixed versions);
- 1 when pip-audit fails for another reason than reaching the vulnerability service;
- when the service cannot answer (unreachable, or it knows nothing of a dependency's version),
  those dependencies were not audited: the summary says how many and why; that fails only with
  AUDIT_STRICT=1, so that a machine without access to the service can still run `make test`.

Extra arguments are passed to pip-audit (for example ``-s osv`` to use the OSV service).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CONNECTION_ERRORS = ("ConnectionError", "Connection error", "Failed to resolve", "timed out")


def main(argv: list[str]) -> int:
    strict = os.environ.get("AUDIT_STRICT") == "1"
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
            tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
            if any(marker in result.stderr for marker in CONNECTION_ERRORS):
                print(f"pip-audit: the vulnerability service is unreachable: {tail[0]}")
                print(
                    "pip-audit: nothing was audited" + ("" if strict else " (AUDIT_STRICT=1 fails)")
                )
                return 1 if strict else 0
            print(result.stderr[-3000:], file=sys.stderr)
            print(f"pip-audit failed (exit {result.returncode}): {tail[0]}")
            return 1
        dependencies = json.loads(report.read_text())["dependencies"]
    editable = [d for d in dependencies if "editable" in d.get("skip_reason", "")]
    skipped = [d for d in dependencies if "skip_reason" in d and d not in editable]
    audited = [d for d in dependencies if "skip_reason" not in d]
    vulnerable = [d for d in audited if d.get("vulns")]
    for dependency in vulnerable:
        for vuln in dependency["vulns"]:
            fixed = ", ".join(vuln.get("fix_versions") or []) or "no fixed version"
            print(
                f"VULNERABLE {dependency['name']} {dependency['version']}: {vuln['id']} "
                f"(fixed in: {fixed})"
            )
    count = sum(len(d["vulns"]) for d in vulnerable)
    print(
        f"pip-audit: {len(dependencies)} installed, {len(editable)} editable (this project and "
        f"its local plugins, skipped), {len(audited)} audited, {len(skipped)} not audited; "
        f"{count} known vulnerabilities in {len(vulnerable)} of them"
    )
    if skipped:
        reasons = sorted({d["skip_reason"].split(":")[0] for d in skipped})
        print(f"pip-audit: not audited ({'; '.join(reasons)}), for example: ", end="")
        print(", ".join(f"{d['name']}" for d in skipped[:8]) + ("…" if len(skipped) > 8 else ""))
        if strict:
            print("pip-audit: AUDIT_STRICT=1: dependencies that could not be audited fail")
    if result.returncode not in (0, 1):
        print(result.stderr[-3000:], file=sys.stderr)
        return 1
    return 1 if vulnerable or (strict and skipped) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
