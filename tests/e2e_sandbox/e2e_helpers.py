"""Helpers only the manager's "must show" tests (issue 5) need; the shared building blocks
live in :mod:`dispatcher.sandbox.testkit`."""

from __future__ import annotations

import re
from pathlib import Path

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_series() -> dict[str, str]:
    """``{series name: type}`` from the table of docs/metrics.md."""
    found = re.findall(
        r"^\| `(multikueue_dispatcher_\w+)` \| (\w+) \|", METRICS_DOC.read_text(), re.M
    )
    return dict(found)
