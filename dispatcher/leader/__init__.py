"""Leader election on a coordination.k8s.io/v1 Lease, on anyio (README, *Operations*).

:class:`LeaderElector` runs the controller only while this replica holds the Lease, steps down
(:class:`LeadershipLost`) when renewal fails, and releases the Lease on shutdown.
:class:`LeaderElectionSettings` is embedded in the application's settings.
"""

from __future__ import annotations

from dispatcher.leader.elector import LeaderElector, LeadershipLost, Role, default_identity
from dispatcher.leader.settings import LeaderElectionSettings

__all__ = [
    "LeaderElectionSettings",
    "LeaderElector",
    "LeadershipLost",
    "Role",
    "default_identity",
]
