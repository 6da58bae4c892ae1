"""Guards for the layering contracts (design section 3) in pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dispatcher"
# Beside the production layers (design section 3): not production code, or no layer of its own.
OUTSIDE_LAYERS = {"sandbox", "sim", "testing"}


def contracts() -> list[dict[str, object]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, object]] = data["tool"]["importlinter"]["contracts"]
    return found


def top_level_modules() -> set[str]:
    names = set()
    for path in PACKAGE.iterdir():
        if path.name.startswith("_") or path.name == "py.typed" or path.name == "__pycache__":
            continue
        names.add(path.stem)
    return names


def named_in(contract: dict[str, object], key: str) -> set[str]:
    entries = contract.get(key) or []
    assert isinstance(entries, list)
    names = set()
    for entry in entries:
        for part in str(entry).split("|"):
            names.add(part.strip().strip("()").removeprefix("dispatcher.").split(".")[0])
    return names


def test_every_top_level_module_has_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")
    missing = top_level_modules() - named_in(layers, "layers") - OUTSIDE_LAYERS
    assert not missing, f"add {sorted(missing)} to the layers contract in pyproject.toml"


@pytest.mark.parametrize(
    "contract_name",
    [
        "Only dispatcher.k8s talks to kubernetes_asyncio",
        "Production code never imports the sandbox or the simulator",
    ],
)
def test_forbidden_contracts_cover_every_module(contract_name: str) -> None:
    contract = next(c for c in contracts() if c["name"] == contract_name)
    exempt = {"k8s"} if "kubernetes_asyncio" in contract_name else {"cli", "sandbox", "sim"}
    missing = top_level_modules() - named_in(contract, "source_modules") - exempt
    assert not missing, f"add {sorted(missing)} to the contract {contract_name!r}"
