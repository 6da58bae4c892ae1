"""docs/configuration.md (the README's configuration table) is generated from the settings'
field descriptions, lists every field, and its YAML example is valid."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

from dispatcher.app.settings import FALLBACK_DESCRIPTIONS, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "scripts" / "gen_config_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str | None]]:
    for name, info in model.model_fields.items():
        yield prefix + name, info.description
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            yield from fields(info.annotation, f"{prefix}{name}.")


def documented() -> list[str]:
    return re.findall(r"^\| `([\w.]+)` \|", DOC.read_text(), re.MULTILINE)


def test_committed_file_is_current() -> None:
    assert DOC.read_text() == generator().render(), (
        "docs/configuration.md is stale: run python scripts/gen_config_docs.py"
    )


def test_every_field_has_a_description() -> None:
    missing = [
        name
        for name, description in fields(Settings)
        if not (description or FALLBACK_DESCRIPTIONS.get(name))
    ]
    assert not missing


def test_table_lists_every_field_once_and_nothing_else() -> None:
    assert documented() == [name for name, _ in fields(Settings)]


def test_env_column_names_the_variable_of_each_field() -> None:
    text = DOC.read_text()
    for name, _ in fields(Settings):
        variable = "DISPATCHER_" + name.upper().replace(".", "__")
        assert f"| `{name}` | `{variable}`" in text


def test_yaml_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("DISPATCHER_"):
            monkeypatch.delenv(name)
    (example,) = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
    path = tmp_path / "config.yaml"
    path.write_text(example)
    settings = load_settings({}, path)
    assert settings.stuck_after_seconds == 30
    assert settings.leader_election.lease_duration_seconds == 20
