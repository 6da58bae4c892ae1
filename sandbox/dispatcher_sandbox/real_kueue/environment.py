"""The demo's environment on real Kueue: what ``multikueue-dispatcher sandbox --backend real``
runs instead of the emulated clusters.

:func:`real_environment` starts a topology on real kube-apiserver, etcd and Kueue processes
(:mod:`.topology`), the real dispatcher in this event loop (as the sandbox does), and watches
the Workloads of every cluster with list-then-watch informers. The object it yields offers the
demo the same names the sandbox's :class:`~dispatcher_sandbox.environment.Environment` does —
``topology``, ``sandbox`` (clusters and their kubeconfig files), ``kueue`` (per cluster a
connection with ``subscribe`` and ``cache``), ``manager_client``, ``dispatcher`` and
``submit`` — so the demo's tracker, live view and summary read real Kueue unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from dispatcher.app.manager import Manager
from dispatcher.topology import Topology, WorkloadLine
from dispatcher_sandbox.environment import DISPATCHER_NAME, Remedy, start_dispatcher_with
from dispatcher_sandbox.kube_client import WORKLOADS, Informer, KubeClient, Resource
from dispatcher_sandbox.real_kueue.topology import RealTopology, real_topology
from dispatcher_sandbox.seeding import submit_workloads

Obj = dict[str, Any]
Listener = Callable[[Resource, str, Obj], None]


class WatchedCluster:
    """The Workloads of one real cluster, as the emulation's connection offers them."""

    def __init__(self, name: str, kubeconfig: Mapping[str, Any]) -> None:
        self.name = name
        self.client = KubeClient(kubeconfig, user_agent="mkd-real-demo-observer")
        self._listeners: list[Listener] = []
        self.informer = Informer(self.client, WORKLOADS, self._changed)

    def _changed(self, kind: str, obj: Obj) -> None:
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            for listener in list(self._listeners):
                listener(WORKLOADS, kind, obj)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(resource, kind, object)`` on every Workload change."""
        self._listeners.append(listener)

    def cache(self, resource: Resource) -> Informer:
        """The informer of ``resource`` (only Workloads are watched)."""
        if resource != WORKLOADS:
            raise KeyError(f"{self.name}: only Workloads are watched, not {resource.plural}")
        return self.informer


@dataclass
class _Handle:
    """A cluster as the demo names it."""

    name: str
    kubeconfig_file: Path


@dataclass
class _Clusters:
    manager: _Handle
    workers: list[_Handle]
    schemas: bool = True
    """Real Kueue's CRDs are installed: its schemas and CEL rules apply."""

    def kubeconfig_path(self, cluster: _Handle) -> Path:
        return cluster.kubeconfig_file


@dataclass
class _Connected:
    conn: WatchedCluster


@dataclass
class _Kueue:
    manager: _Connected
    workers: dict[str, _Connected]


@dataclass
class RealEnvironment:
    """A running topology on real Kueue with the dispatcher (see the module docstring)."""

    topology: Topology
    running: RealTopology
    sandbox: _Clusters
    kueue: _Kueue
    manager_client: KubeClient
    dispatcher: Manager | None = None
    watched: list[WatchedCluster] = field(default_factory=list)

    async def submit(self, lines: Iterable[WorkloadLine]) -> list[Obj]:
        """Create the Jobs of ``lines`` on the manager."""
        return await submit_workloads(self.manager_client, list(lines), self.topology)


@contextlib.asynccontextmanager
async def real_environment(
    directory: Path,
    topology: Topology,
    *,
    settings: Mapping[str, Any] | None = None,
    remedy: Remedy = "policy",
    time_scale: float = 1.0,
) -> AsyncIterator[RealEnvironment]:
    """Start ``topology`` on real Kueue in ``directory`` with the dispatcher running."""
    async with (
        real_topology(
            directory,
            topology,
            dispatcher_name=DISPATCHER_NAME,
            remedy=remedy,
            time_scale=time_scale,
        ) as running,
        anyio.create_task_group() as group,
    ):
        plane = running.plane
        for cluster in plane.clusters:  # where `sandbox serve` puts them too
            (directory / f"{cluster.name}.kubeconfig").write_text(
                cluster.kubeconfig_path.read_text()
            )
        watched = {c.name: WatchedCluster(c.name, c.kubeconfig) for c in plane.clusters}
        for observed in watched.values():
            group.start_soon(observed.informer.run)
        for observed in watched.values():
            with anyio.fail_after(30):
                await observed.informer.synced.wait()
        handles = {
            c.name: _Handle(c.name, directory / f"{c.name}.kubeconfig") for c in plane.clusters
        }
        manager = topology.manager.name
        env = RealEnvironment(
            topology=topology,
            running=running,
            sandbox=_Clusters(
                manager=handles[manager],
                workers=[handles[w.name] for w in topology.workers],
            ),
            kueue=_Kueue(
                manager=_Connected(watched[manager]),
                workers={w.name: _Connected(watched[w.name]) for w in topology.workers},
            ),
            manager_client=plane.manager.client("sandbox-user"),
            watched=list(watched.values()),
        )
        try:
            env.dispatcher = await start_dispatcher_with(
                group,
                handles[manager].kubeconfig_file,
                DISPATCHER_NAME,
                settings or {},
            )
            yield env
        finally:
            group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await env.manager_client.close()
                for observed in watched.values():
                    await observed.client.close()
