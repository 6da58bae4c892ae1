"""multikueue-dispatcher: an external dispatcher for Kueue MultiKueue.

The package is layered (see the design card): ``cli`` wires processes together, ``k8s`` is the
only module that talks to ``kubernetes_asyncio``, algorithms are pure, and ``sandbox`` holds the
emulated Kubernetes API servers and Kueue that the tests and the demo run against.

Plugin authors mark their hook implementations with :data:`hookimpl` (``from dispatcher import
hookimpl``); the hooks are documented in ``docs/plugins.md``.
"""

from __future__ import annotations

from dispatcher.plugins.markers import hookimpl

__all__ = ["__version__", "hookimpl"]

__version__ = "0.1.0"
