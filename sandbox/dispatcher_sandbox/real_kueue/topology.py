"""A sandbox topology on the real control plane: clusters, Kueue objects, worker Secrets.

:func:`real_topology` is the real-Kueue counterpart of the sandbox's ``start_topology``: the
same topology file, the same objects (:func:`dispatcher.topology.topology_objects`),
the worker kubeconfig Secrets on the manager, and a :class:`~.finisher.JobFinisher` per worker.
It returns once Kueue reports every MultiKueueCluster ``Active``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from dispatcher.topology import Topology
from dispatcher_sandbox.environment import Remedy
from dispatcher_sandbox.kube_client import MULTIKUEUE_CLUSTERS
from dispatcher_sandbox.real_kueue.finisher import JobFinisher
from dispatcher_sandbox.real_kueue.plane import (
    KueueOptions,
    RealPlane,
    real_plane,
    wait_until,
)
from dispatcher_sandbox.seeding import apply_topology


@dataclass
class RealTopology:
    """A running topology on real clusters."""

    plane: RealPlane
    topology: Topology
    finishers: dict[str, JobFinisher] = field(default_factory=dict)

    def kubeconfig_path(self, cluster: str) -> Path:
        """The kubeconfig file of a cluster."""
        return self.plane.cluster(cluster).kubeconfig_path

    async def wait_active(self, within: float = 90.0) -> None:
        """Wait until Kueue reports every MultiKueueCluster of the topology ``Active``."""
        names = [w.name for w in self.topology.workers]
        async with self.plane.manager.client() as api:

            async def active() -> bool:
                for name in names:
                    mkc = await api.get(MULTIKUEUE_CLUSTERS, name)
                    conditions = ((mkc or {}).get("status") or {}).get("conditions") or []
                    if not any(
                        c.get("type") == "Active" and c.get("status") == "True" for c in conditions
                    ):
                        return False
                return True

            await wait_until(
                active, f"MultiKueueClusters {names} Active", within, self.plane.manager.processes
            )


async def apply_objects(plane: RealPlane, topology: Topology) -> int:
    """Create the topology's objects on every cluster (server-side apply)."""
    clients = {c.name: c.client() for c in plane.clusters}
    try:
        kubeconfigs = {w.name: plane.cluster(w.name).kubeconfig for w in topology.workers}
        return await apply_topology(topology, clients, kubeconfigs)
    finally:
        for api in clients.values():
            await api.close()


@contextlib.asynccontextmanager
async def real_topology(
    directory: Path,
    topology: Topology,
    *,
    dispatcher_name: str,
    remedy: Remedy = "policy",
    kueue: KueueOptions | None = None,
    time_scale: float = 1.0,
) -> AsyncIterator[RealTopology]:
    """Start ``topology`` on real clusters in ``directory`` (see the module docstring)."""
    async with (
        real_plane(
            directory,
            topology.manager.name,
            [w.name for w in topology.workers],
            dispatcher_name=dispatcher_name,
            remedy=remedy,
            kueue=kueue,
        ) as plane,
        anyio.create_task_group() as group,
    ):
        running = RealTopology(plane, topology)
        await apply_objects(plane, topology)
        for worker in topology.workers:
            finisher = JobFinisher(plane.cluster(worker.name).kubeconfig, worker.name, time_scale)
            running.finishers[worker.name] = finisher
            await group.start(finisher.run)
        await running.wait_active()
        try:
            yield running
        finally:
            group.cancel_scope.cancel()
