"""docs/plugins.md documents every hookspec (with its exact signature) and every option.

The same guard as datasette's ``test_docs.py``: adding a hook or an option without documenting
it fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from dispatcher.algorithms import BUILTIN_ALGORITHMS, AlgorithmSpec
from dispatcher.plugins import spec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
TEXT = DOCS.read_text(encoding="utf-8")

HOOKSPECS = [
    fn
    for _, fn in inspect.getmembers(spec, inspect.isfunction)
    if hasattr(fn, "multikueue_dispatcher_spec")
]


def _signature(fn: Any) -> str:
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"{fn.__name__}({params}) -> {sig.return_annotation}"


def _section(heading: str) -> str:
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^#{{2,3}} |\Z)", TEXT, re.M | re.S)
    assert match, f"docs/plugins.md has no section '### {heading}'"
    return match.group(1)


def test_there_are_hookspecs() -> None:
    assert {fn.__name__ for fn in HOOKSPECS} == set(spec.__all__)


@pytest.mark.parametrize("hook", HOOKSPECS, ids=lambda fn: fn.__name__)
def test_hookspec_is_documented_with_its_signature(hook: Any) -> None:
    assert (hook.__doc__ or "").strip(), f"{hook.__name__} has no docstring"
    body = _section(f"`{_signature(hook)}`")
    assert body.strip(), f"{hook.__name__} is documented without text"


@pytest.mark.parametrize("algorithm", BUILTIN_ALGORITHMS, ids=lambda a: a.name)
def test_every_builtin_option_is_documented(algorithm: AlgorithmSpec[Any]) -> None:
    body = _section(f"`{algorithm.name}`")
    rows = re.findall(r"^\| `([a-z_]+)` \|", body, re.M)
    fields = algorithm.options.model_fields
    assert sorted(rows) == sorted(fields), f"option table of {algorithm.name} is out of date"
    for name, info in fields.items():
        assert info.description, f"{algorithm.name}.{name} has no description in its model"
