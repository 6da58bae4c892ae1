"""Fixtures of the algorithm tests."""

from __future__ import annotations

import pytest

from dispatcher.algorithms import stages


@pytest.fixture
def assignments(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the flavor assignments the decision stages make (``[count]``)."""
    calls = [0]
    original = stages.assign_flavors

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stages, "assign_flavors", counted)
    return calls
