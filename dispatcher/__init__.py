"""multikueue-dispatcher: an external dispatcher for Kueue MultiKueue.

The package is layered (README, *Development*): ``cli`` wires processes together, ``k8s`` is the
only module that talks to ``kubernetes_asyncio``, algorithms are pure. The test world (fake API
servers, the Kueue emulation, the demo) is a distribution of its own, ``dispatcher_sandbox``.

Plugin authors mark their hook implementations with :data:`hookimpl` (``from dispatcher import
hookimpl``); the hooks are documented in ``docs/plugins.md``. Importing this package loads
nothing else: ``hookimpl`` (and with it pluggy) is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.plugins.markers import hookimpl

__all__ = ["__version__", "hookimpl"]

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        from dispatcher.plugins.markers import hookimpl

        return hookimpl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
