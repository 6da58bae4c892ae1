"""Helpers only the manager's "must show" tests (issue 5) need; the shared building blocks
live in :mod:`dispatcher.sandbox.testkit`."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from dispatcher.cli import main as cli_main

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_series() -> dict[str, str]:
    """``{series name: type}`` from the table of docs/metrics.md."""
    found = re.findall(
        r"^\| `(multikueue_dispatcher_\w+)` \| (\w+) \|", METRICS_DOC.read_text(), re.M
    )
    return dict(found)


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``multikueue-dispatcher ARGV`` in-process (it calls ``anyio.run``: call this from a
    worker thread); returns the exit code and what it printed. Not capsys: the dispatcher's
    log handler keeps the stream it was configured with, which capsys would close."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(argv)
    return code, out.getvalue()
