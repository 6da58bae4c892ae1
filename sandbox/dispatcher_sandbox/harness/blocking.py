"""Running the product as if the test world were not installed: which modules that means, and
the import hook (for a child interpreter) that refuses them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

from dispatcher_sandbox.harness.paths import REPO

_BLOCKER = """\
import sys

BLOCKED = frozenset({modules!r})


class _Blocker:
    '''Refuses the test world and the top-level modules of its own distributions.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
        return None


sys.meta_path.insert(0, _Blocker())
"""


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def world_distributions() -> set[str]:
    """Distributions the test world requires that neither the product nor its ``sim`` extra has
    (the test world's own distribution included)."""
    product = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    world = tomllib.loads((REPO / "sandbox" / "pyproject.toml").read_text())["project"]
    own = _names(product["dependencies"]) | _names(product["optional-dependencies"]["sim"])
    return (_names(world["dependencies"]) | {world["name"]}) - own - {product["name"]}


def world_modules() -> set[str]:
    """The top-level modules those distributions install here."""
    wanted = world_distributions()
    return {
        module
        for module, distributions in importlib.metadata.packages_distributions().items()
        if {d.lower() for d in distributions} & wanted
    }


def blocker_source(modules: set[str] | None = None) -> str:
    """Python source that makes ``modules`` (default: :func:`world_modules`) unimportable
    in the interpreter that runs it (a ``sitecustomize.py``, or the head of a ``-c`` script)."""
    return _BLOCKER.format(modules=sorted(world_modules() if modules is None else modules))
