"""``multikueue-dispatcher sandbox`` and ``sandbox serve``: emulated clusters on this machine.

``sandbox serve --dir DIR [--topology FILE | --workers N]`` starts the clusters of a topology
(:mod:`dispatcher.topology`; default: ``topologies/default.yaml``, a manager + ``worker-a100``,
``worker-h100``, ``worker-cpu``; ``--workers N``: a generic one with ``worker-1`` …), each a fake
API server over HTTPS with the Kueue CRDs registered, writes ``DIR/<cluster>.kubeconfig`` (inline
CA data and a token: the form Kueue accepts for workers), applies the topology through the API
(namespaces, flavors, ClusterQueues, LocalQueues on every cluster; on the manager one kubeconfig
Secret per worker in ``kueue-system`` (``<worker>-kubeconfig``, key ``kubeconfig``), the
MultiKueueClusters, MultiKueueConfig, AdmissionCheck and its ClusterQueue), prints ``READY`` and
serves until SIGINT or SIGTERM.

With the Kueue emulation (the default), the clusters also have Kueue's admission hooks
(:func:`dispatcher_sandbox.environment.install_kueue_webhooks`): a user's plain Job with the
``kueue.x-k8s.io/queue-name`` label, created with kubectl, is suspended and given
``spec.managedBy: kueue.x-k8s.io/multikueue`` as Kueue's Job webhook does (C22), and a Workload
created without a Job is rejected by MultiKueue ("No multikueue adapter found"), as on real
Kueue (``tests/sandbox/test_serve_plain_job.py`` shows both on both backends).

:func:`start_topology` is the entry point for whoever adds the Kueue emulation to the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from dispatcher.topology import (
    KUEUE_NAMESPACE,
    Topology,
    generic_topology,
)
from dispatcher_sandbox.fake_apiserver.kubeconfig import dump
from dispatcher_sandbox.fake_apiserver.server import FakeCluster
from dispatcher_sandbox.kube_client import KubeClient
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS, kueue_crds_dir
from dispatcher_sandbox.seeding import apply_topology

DEFAULT_WORKERS = ("worker-a100", "worker-h100", "worker-cpu")


@dataclass
class Sandbox:
    """Running emulated clusters and where their kubeconfigs are."""

    manager: FakeCluster
    workers: list[FakeCluster]
    directory: Path
    schemas: bool
    topology: Topology | None = None

    @property
    def clusters(self) -> list[FakeCluster]:
        """Manager first, then the workers."""
        return [self.manager, *self.workers]

    def cluster(self, name: str) -> FakeCluster:
        """A cluster by name."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)

    async def stop(self) -> None:
        """Stop every cluster (workers first)."""
        for cluster in reversed(self.clusters):
            if cluster.is_up:
                await cluster.stop()

    def kubeconfig_path(self, cluster: FakeCluster) -> Path:
        """``DIR/<cluster>.kubeconfig``."""
        return self.directory / f"{cluster.name}.kubeconfig"


def _new_cluster(name: str, crds: Path | None) -> FakeCluster:
    if crds is not None:
        return FakeCluster(name, crd_paths=[crds])
    return FakeCluster(name, resources=KUEUE_SHORT_FORMS)


def _seed(cluster: FakeCluster, objects: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    for group, plural, body in objects:
        cluster._seed_object(group, plural, "v1", body)


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


async def start_topology(
    directory: Path, topology: Topology, *, crds: Path | None = None
) -> Sandbox:
    """Start one fake cluster per cluster of ``topology`` and set them up through their API.

    Writes ``DIR/<cluster>.kubeconfig`` (mode 0600) for each, seeds a ``<cluster>-control-plane``
    node and the ``kueue-system`` namespace, then applies the topology through the API
    (``apply_topology``, worker kubeconfig Secrets on the manager included). ``crds`` is the
    Kueue CRD folder (default: ``kueue_crds_dir()``; without one the Kueue kinds are served
    without validation). Stop the clusters with :meth:`Sandbox.stop`, or use
    :func:`run_topology`.
    """
    crds = crds if crds is not None else kueue_crds_dir()
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    manager = _new_cluster(topology.manager.name, crds)
    workers = [_new_cluster(w.name, crds) for w in topology.workers]
    sandbox = Sandbox(manager, workers, directory, schemas=crds is not None, topology=topology)
    clients: dict[str, KubeClient] = {}
    try:
        for cluster in sandbox.clusters:
            await cluster.start()
            _seed(
                cluster,
                [
                    ("", "namespaces", {"metadata": {"name": KUEUE_NAMESPACE}}),
                    ("", "nodes", _node(f"{cluster.name}-control-plane")),
                ],
            )
            path = anyio.Path(sandbox.kubeconfig_path(cluster))
            await path.write_text(dump(cluster.kubeconfig))
            await path.chmod(0o600)
            clients[cluster.name] = KubeClient(cluster.kubeconfig, user_agent="sandbox-setup")
        await apply_topology(topology, clients, {w.name: w.kubeconfig for w in workers})
    except BaseException:
        await sandbox.stop()
        raise
    finally:
        for kube in clients.values():
            await kube.close()
    return sandbox


@contextlib.asynccontextmanager
async def run_topology(
    directory: Path, topology: Topology, *, crds: Path | None = None
) -> AsyncIterator[Sandbox]:
    """:func:`start_topology`, stopped when the block ends."""
    sandbox = await start_topology(directory, topology, crds=crds)
    try:
        yield sandbox
    finally:
        await sandbox.stop()


@contextlib.asynccontextmanager
async def run_sandbox(
    directory: Path, worker_names: Sequence[str], *, crds: Path | None = None
) -> AsyncIterator[Sandbox]:
    """A manager and the named workers with the generic topology (see ``generic_topology``)."""
    async with run_topology(directory, generic_topology(worker_names), crds=crds) as sandbox:
        yield sandbox


async def wait_for_signal(seconds: float | None = None) -> None:
    """Serve until SIGINT or SIGTERM, or for ``seconds`` when given."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        with anyio.move_on_after(seconds if seconds is not None else math.inf):
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def describe(sandbox: Sandbox) -> str:
    lines = [
        f"{'cluster':<14} {'url':<28} kubeconfig",
    ]
    for cluster in sandbox.clusters:
        lines.append(f"{cluster.name:<14} {cluster.url:<28} {sandbox.kubeconfig_path(cluster)}")
    schema_note = (
        "Kueue CRDs: real v0.19.2 schemas and CEL rules enforced"
        if sandbox.schemas
        else "Kueue CRDs: not found (set KUEUE_CRDS_DIR); Kueue kinds served without validation"
    )
    lines.append(schema_note)
    return "\n".join(lines)


BUILTIN_DISPATCHERS = {
    "all-at-once": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
}
