"""multikueue-dispatcher: an external dispatcher for Kueue MultiKueue.

The package is layered (see the design card): ``cli`` wires processes together, ``k8s`` is the
only module that talks to ``kubernetes_asyncio``, algorithms are pure, and ``sandbox`` holds the
emulated Kubernetes API servers and Kueue that the tests and the demo run against.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
