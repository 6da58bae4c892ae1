"""The ``plugins`` command (README, *The manager process*): algorithms and where each comes from."""

from __future__ import annotations

import json

import pytest

from dispatcher.cli import main


def run_plugins(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["plugins", "--json"]) == 0
    parsed: dict[str, object] = json.loads(capsys.readouterr().out)
    return parsed


def test_lists_builtin_and_entry_point_algorithms(capsys: pytest.CaptureFixture[str]) -> None:
    listed = run_plugins(capsys)
    sources = {row["algorithm"]: row["source"] for row in listed["algorithms"]}  # type: ignore[attr-defined]
    assert sources["capacity-first"] == "built-in"
    assert sources["gpu-type-affinity"] == "built-in"
    assert sources["cost-aware"].startswith("multikueue-dispatcher-cost==")
    assert listed["errors"] == []


def test_blocked_plugin_is_not_listed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISPATCHER_DISABLED_PLUGINS", "cost")
    names = {row["algorithm"] for row in run_plugins(capsys)["algorithms"]}  # type: ignore[attr-defined]
    assert "cost-aware" not in names
    assert "capacity-first" in names


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ALGORITHM", "SOURCE", "SUMMARY"]
    assert any(line.startswith("incremental ") for line in lines)
