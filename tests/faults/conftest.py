"""The fault-injection suite (issue 8): marker ``faults`` and the figures it reports.

Tests record what they measured with the ``figures`` fixture (``figures.record("worker-loss
re-nomination", 0.41, "s")``); the terminal summary prints them as one table at the end of the
run, and ``RELIABILITY_REPORT=path.json`` also writes them as JSON (the README's "Reliability"
section quotes a CI run of this table).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Figure:
    """One measured figure of one test."""

    test: str
    name: str
    value: float
    unit: str


FIGURES: list[Figure] = []


@dataclass
class Figures:
    """The recorder handed to one test."""

    test: str

    def record(self, name: str, value: float, unit: str = "") -> None:
        """Keep ``value`` (in ``unit``) under ``name`` for the end-of-run table."""
        FIGURES.append(Figure(self.test, name, float(value), unit))


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    """Record figures for the reliability table of this run."""
    return Figures(request.node.name)


def _format(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures of the fault suite (and write them as JSON when asked)."""
    if not FIGURES:
        return
    terminalreporter.section("reliability figures (tests/faults)")
    width = max(len(f.name) for f in FIGURES)
    for figure in FIGURES:
        value = f"{_format(figure.value)} {figure.unit}".strip()
        terminalreporter.write_line(f"{figure.name:<{width}}  {value:>12}  [{figure.test}]")
    target = os.environ.get("RELIABILITY_REPORT")
    if target:
        Path(target).write_text(json.dumps([asdict(f) for f in FIGURES], indent=2) + "\n")
