"""Helpers only the manager's "must show" tests (issue 5) need; the shared building blocks
live in :mod:`dispatcher_sandbox.harness.scenario`."""

from __future__ import annotations

import re

from dispatcher_sandbox.harness.paths import REPO

METRICS_DOC = REPO / "docs" / "metrics.md"


def documented_series() -> dict[str, str]:
    """``{series name: type}`` from the table of docs/metrics.md."""
    found = re.findall(
        r"^\| `(multikueue_dispatcher_\w+)` \| (\w+) \|", METRICS_DOC.read_text(), re.M
    )
    return dict(found)
