"""Guards for the layering contracts in pyproject.toml (README, *Development*)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dispatcher"
# Beside the production layers: not production code (the simulator, the topology files it and
# the test world read), or no layer of its own (the plugin authors' kit).
OUTSIDE_LAYERS = {"sim", "testing", "topology"}


def contracts() -> list[dict[str, object]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, object]] = data["tool"]["importlinter"]["contracts"]
    return found


def contract(name: str) -> dict[str, object]:
    return next(c for c in contracts() if c["name"] == name)


def top_level_modules() -> set[str]:
    names = set()
    for path in PACKAGE.iterdir():
        if path.name.startswith("_") or path.name == "py.typed" or path.name == "__pycache__":
            continue
        names.add(path.stem)
    return names


def named_in(entries_of: dict[str, object], key: str) -> set[str]:
    entries = entries_of.get(key) or []
    assert isinstance(entries, list)
    names = set()
    for entry in entries:
        for part in str(entry).split("|"):
            names.add(part.strip().strip("()").removeprefix("dispatcher.").split(".")[0])
    return names


def test_every_top_level_module_has_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")
    assert layers["containers"] == ["dispatcher"]
    missing = top_level_modules() - named_in(layers, "layers") - OUTSIDE_LAYERS
    assert not missing, f"add {sorted(missing)} to the layers contract in pyproject.toml"


@pytest.mark.parametrize(
    ("contract_name", "exempt"),
    [
        pytest.param("Only dispatcher.k8s talks to kubernetes_asyncio", {"k8s"}, id="client"),
        pytest.param(
            "Production code never imports the simulator or the topology files",
            {"cli", "sim", "topology"},
            id="simulator",
        ),
    ],
)
def test_forbidden_contracts_cover_every_module(contract_name: str, exempt: set[str]) -> None:
    missing = top_level_modules() - named_in(contract(contract_name), "source_modules") - exempt
    assert not missing, f"add {sorted(missing)} to the contract {contract_name!r}"


def test_the_whole_product_is_kept_from_the_test_world() -> None:
    kept = contract("The product never imports the test world")
    assert kept["source_modules"] == ["dispatcher"]
    assert kept["forbidden_modules"] == ["dispatcher_sandbox"]


def test_every_room_of_the_test_world_but_the_harness_is_kept_from_it() -> None:
    rooms = {
        path.stem
        for path in (ROOT / "sandbox" / "dispatcher_sandbox").iterdir()
        if not path.name.startswith("_") and path.name not in {"py.typed", "__pycache__"}
    } - {"harness"}
    guarded = {
        str(m).removeprefix("dispatcher_sandbox.")
        for m in contract("Only tests, benchmarks and scripts use the test harness")[
            "source_modules"
        ]  # type: ignore[union-attr]
    }
    # metrics_text, kueue_crds: leaves that import nothing of the test world.
    missing = rooms - guarded - {"metrics_text", "kueue_crds"}
    assert not missing, f"add {sorted(missing)} to the harness contract in pyproject.toml"
