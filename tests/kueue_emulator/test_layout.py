"""The emulation's file map (``sandbox/dispatcher_sandbox/kueue_emulator/__init__.py``) lists every
module it has.

Issue 14 asks the emulation to follow Kueue's own file layout so that an upgrade of Kueue can be
compared file by file; the map in the package docstring is how a contributor finds the Kueue file
a module mirrors, so a module missing from it (or a row naming a module that is gone) fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dispatcher_sandbox.kueue_emulator as emulation

ROOT = Path(emulation.__file__).parent


def _defines_anything(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(isinstance(node, kinds) for node in tree.body)


def _modules() -> set[str]:
    found = set()
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "__init__.py":
            continue  # the map itself
        if path.name == "__init__.py" and not _defines_anything(path):
            continue  # a package's public names only: its own docstring maps its modules
        found.add(relative)
    return found


def _mapped() -> set[str]:
    doc = emulation.__doc__ or ""
    return set(re.findall(r"^``([\w/]+\.py)``", doc, flags=re.MULTILINE))


def test_every_emulation_module_is_in_the_map() -> None:
    missing = sorted(_modules() - _mapped())
    assert not missing, f"modules missing from the map in {ROOT / '__init__.py'}: {missing}"


def test_every_row_of_the_map_names_a_module() -> None:
    gone = sorted(_mapped() - _modules())
    assert not gone, f"rows of the map naming no module: {gone}"


def test_the_core_is_split_like_kueue() -> None:
    """Kueue's scheduler and its core controllers live in separate files; so do ours."""
    core = {m for m in _modules() if m.startswith("core/")}
    assert {
        "core/scheduler.py",
        "core/workload_controller.py",
        "core/queue_controllers.py",
        "core/cache.py",
        "core/workload.py",
    } <= core
