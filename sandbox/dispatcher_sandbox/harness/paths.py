"""Where the checkout is: the harness reads a few of its files (fixtures, e2e topology, docs)."""

from __future__ import annotations

from pathlib import Path

# sandbox/dispatcher_sandbox/harness/paths.py -> the repository's root.
REPO = Path(__file__).resolve().parents[3]
TESTS = REPO / "tests"


def require_checkout() -> Path:
    """The repository root, or a clear error when the harness runs from an installed copy."""
    if not (TESTS.is_dir() and (REPO / "pyproject.toml").is_file()):
        raise RuntimeError(
            f"dispatcher_sandbox.harness runs from a checkout of the repository (no tests/ "
            f"folder beside {REPO}): install the test world with `pip install -e ./sandbox`"
        )
    return REPO
