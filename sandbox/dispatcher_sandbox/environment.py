"""A whole emulated MultiKueue installation: clusters, Kueue, and (optionally) the dispatcher.

Used by the ``sandbox`` command, by the end-to-end tests, and as the ``sandbox`` backend of the
shared scenario suite. The clusters are fake API servers set up from a topology through their
API; Kueue is the emulation (manager + workers); the dispatcher is the real manager process,
run in this event loop, talking to the manager over HTTPS through a kubeconfig file and to the
workers through the kubeconfig Secrets, exactly as in a cluster.

Kueue's side is configured as a platform team would: the manager's ``dispatcherName`` names our
dispatcher (external mode), Kueue's workload webhook rule on ``clusterName`` (C18) is on, Kueue's
Job webhook defaults ``spec.managedBy`` on the Jobs users create (C22,
:mod:`dispatcher_sandbox.kueue_emulator.jobs.job_webhook`), and one remedy for the field-manager
pitfall is chosen (``policy``: the ``clear-nominated-cluster-names`` admission policy, C46, the
default; ``gate``: the ``WorkloadRequestUseMergePatch`` feature gate, C45; ``none``: neither, to
show the pitfall).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from dispatcher.app.manager import Manager, run_manager
from dispatcher.app.settings import load_settings
from dispatcher.topology import Topology, WorkloadLine, check_manager_lines
from dispatcher_sandbox.fake_apiserver.admission import (
    kueue_clear_nominated_cluster_names_hook,
    kueue_cluster_name_webhook,
)
from dispatcher_sandbox.kube_client import WORKLOADS, KubeClient
from dispatcher_sandbox.kueue_crds import KUEUE_GROUP, UNSERVED_API_VERSIONS
from dispatcher_sandbox.kueue_emulator.emulator import EmulatedKueue, run_kueue
from dispatcher_sandbox.kueue_emulator.jobs.job_webhook import kueue_job_webhook, store_lookup
from dispatcher_sandbox.kueue_emulator.runtime import Clock, KueueConfig
from dispatcher_sandbox.seeding import submit_workloads
from dispatcher_sandbox.serve import Sandbox, start_topology

log = logging.getLogger(__name__)

__all__ = ["DISPATCHER_NAME", "Environment", "Remedy", "environment", "install_kueue_webhooks"]

DISPATCHER_NAME = "multikueue-dispatcher.io/dispatcher"
Remedy = Literal["policy", "gate", "none"]

Obj = dict[str, Any]


@dataclass
class Environment:
    """A running installation."""

    sandbox: Sandbox
    kueue: EmulatedKueue
    topology: Topology
    manager_client: KubeClient
    dispatcher: Manager | None = None

    async def submit(self, lines: Iterable[WorkloadLine]) -> list[Obj]:
        """Create the Jobs of ``lines`` on the manager, as a user does; returns them as created.

        A ``kind: Workload`` line raises :class:`~dispatcher.topology.WorkloadFileError`
        before anything is created: Kueue's MultiKueue would reject that Workload (C22).
        """
        lines = list(lines)
        check_manager_lines(lines)
        return await submit_workloads(self.manager_client, lines, self.topology)

    async def workloads(self) -> list[Obj]:
        """The manager's Workloads, fresh from the API."""
        listed = await self.manager_client.list(WORKLOADS)
        items: list[Obj] = listed.get("items") or []
        return items

    async def wait_for_manager(
        self, predicate: Callable[[list[Obj]], bool], within: float = 60.0
    ) -> list[Obj]:
        """Wait until ``predicate(manager Workloads)`` holds, re-checking on every change the
        emulated Kueue's manager informer sees; returns the Workloads."""
        informer = self.kueue.manager.conn.cache(WORKLOADS)
        changed = anyio.Event()

        def listener(*_: object) -> None:
            nonlocal changed
            changed.set()
            changed = anyio.Event()

        self.kueue.manager.conn.subscribe(listener)
        with anyio.fail_after(within):
            while True:
                items = informer.items()
                if predicate(items):
                    return items
                await changed.wait()

    async def worker_workloads(self, worker: str) -> list[Obj]:
        """A worker's Workloads (remote copies), fresh from the API."""
        cluster = self.sandbox.cluster(worker)
        async with KubeClient(cluster.kubeconfig, user_agent="sandbox-observer") as kube:
            listed = await kube.list(WORKLOADS)
        items: list[Obj] = listed.get("items") or []
        return items

    async def copies_by_workload(self) -> dict[str, list[str]]:
        """Where the copies are: manager Workload name -> the workers holding a copy (fresh
        from each worker's API, workers in topology order)."""
        copies: dict[str, list[str]] = {}
        for worker in self.sandbox.workers:
            for copy in await self.worker_workloads(worker.name):
                copies.setdefault(copy["metadata"]["name"], []).append(worker.name)
        return copies


def _kueue_config(
    dispatcher_name: str, remedy: Remedy, overrides: Mapping[str, Any]
) -> KueueConfig:
    options: dict[str, Any] = {
        "dispatcher_name": dispatcher_name,
        "merge_patch_gate": remedy == "gate",
    }  # everything else at Kueue's own defaults (the 1 s batch period and worker QPS of C20)
    options.update(overrides)
    return KueueConfig(**options)


@contextlib.asynccontextmanager
async def environment(
    directory: Path,
    topology: Topology,
    *,
    remedy: Remedy = "policy",
    run_dispatcher: bool = True,
    dispatcher_name: str = DISPATCHER_NAME,
    kueue: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    crds: Path | None = None,
) -> AsyncIterator[Environment]:
    """Start the clusters of ``topology`` in ``directory``, Kueue on them, and the dispatcher.

    ``kueue`` overrides :class:`KueueConfig` fields (``{"version": "v0.20"}`` emulates Kueue
    v0.20: v1beta1 unserved on every cluster, the v0.20 feature-gate defaults; see
    ``docs/kueue-versions.md``); ``settings`` overrides dispatcher settings (flat or dotted keys,
    as the command line gives them).
    """
    config = _kueue_config(dispatcher_name, remedy, kueue or {})
    sandbox = await start_topology(directory, topology, crds=crds)
    try:
        for cluster in sandbox.clusters:  # v0.20: kueue.x-k8s.io/v1beta1 is not served
            for version in UNSERVED_API_VERSIONS[config.version]:
                cluster.unserve_version(KUEUE_GROUP, version)
        install_kueue_webhooks(sandbox, remedy)
        manager_client = KubeClient(sandbox.manager.kubeconfig, user_agent="sandbox-user")
        async with (
            manager_client,
            run_kueue(
                sandbox.manager.kubeconfig,
                {w.name: w.kubeconfig for w in sandbox.workers},
                config,
                clock,
            ) as emulated,
            anyio.create_task_group() as group,
        ):
            env = Environment(sandbox, emulated, topology, manager_client)
            if run_dispatcher:
                await start_dispatcher(env, group, dispatcher_name, settings or {})
            try:
                yield env
            finally:
                group.cancel_scope.cancel()
    finally:
        await sandbox.stop()


def install_kueue_webhooks(sandbox: Sandbox, remedy: Remedy) -> None:
    """Kueue's admission hooks on the sandbox's clusters, as a Kueue installation has them.

    Every cluster runs Kueue, so every cluster gets its Job defaulting webhook (``mjob.kb.io``:
    ``suspend`` for queued Jobs, ``spec.managedBy: kueue.x-k8s.io/multikueue`` where the
    LocalQueue's ClusterQueue has a MultiKueue check, C22). The manager also gets the Workload
    webhook rule on ``clusterName`` (C18) and, with ``remedy="policy"``, the
    ``clear-nominated-cluster-names`` admission policy (C46).
    """
    for cluster in sandbox.clusters:
        cluster.admission.add_mutating(kueue_job_webhook(store_lookup(cluster.store)))
    if remedy == "policy":
        sandbox.manager.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    sandbox.manager.admission.add_validating(kueue_cluster_name_webhook())


def dispatcher_flags(dispatcher_name: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Settings of a dispatcher run in the sandbox's event loop: no leader election, probes and
    metrics on free loopback ports, text logs, a 5 s resync; ``overrides`` win."""
    flags: dict[str, Any] = {
        "dispatcher_name": dispatcher_name,
        "leader_election.enabled": False,
        "health_address": "127.0.0.1:0",
        "metrics_address": "127.0.0.1:0",
        "log_format": "text",
        "resync_seconds": 5.0,
    }
    flags.update(overrides)
    return flags


async def start_dispatcher(
    env: Environment,
    group: anyio.abc.TaskGroup,
    dispatcher_name: str,
    overrides: Mapping[str, Any],
) -> Manager:
    """Run the real manager process in ``group``; returns once it serves its probes."""
    kubeconfig = env.sandbox.kubeconfig_path(env.sandbox.manager)
    env.dispatcher = await start_dispatcher_with(group, kubeconfig, dispatcher_name, overrides)
    return env.dispatcher


async def start_dispatcher_with(
    group: anyio.abc.TaskGroup,
    kubeconfig: Path,
    dispatcher_name: str,
    overrides: Mapping[str, Any],
) -> Manager:
    """Run the real manager process against the manager of ``kubeconfig`` in ``group`` (with
    :func:`dispatcher_flags`); returns it once it serves its probes."""
    settings = load_settings(dispatcher_flags(dispatcher_name, overrides), None)
    started = anyio.Event()
    found: list[Manager] = []

    def on_started(manager: Manager) -> None:
        found.append(manager)
        started.set()

    async def run() -> None:
        await run_manager(
            settings, kubeconfig=kubeconfig, handle_signals=False, on_started=on_started
        )

    group.start_soon(run)
    with anyio.fail_after(30):
        await started.wait()
    return found[0]
