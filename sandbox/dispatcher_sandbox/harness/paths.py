"""Where the checkout is: the harness reads a few of its files (fixtures, e2e topology, docs)."""

from __future__ import annotations

from pathlib import Path

# sandbox/dispatcher_sandbox/harness/paths.py -> the repository's root.
REPO = Path(__file__).resolve().parents[3]
TESTS = REPO / "tests"
