"""Every point F1–F61 of ``docs/fake-apiserver.md`` is named by at least one test."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = range(1, 62)


def named_requirements() -> set[int]:
    """F-numbers named one by one (ranges do not count) in the fake API server tests."""
    found: set[int] = set()
    for path in HERE.glob("test_*.py"):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        found.update(int(n) for n in re.findall(r"\b[Ff](\d{1,2})\b", text))
        found.update(int(n) for n in re.findall(r"test_f(\d{1,2})_", text))
    return found


def test_every_requirement_is_named_by_a_test() -> None:
    missing = sorted(set(REQUIREMENTS) - named_requirements())
    assert not missing, f"no test names F{', F'.join(map(str, missing))}"
