"""The registry at start-up: no verdict on a worker before the manager's caches are listed, and
each worker reports when its first connection attempt has an outcome (``settled``), which the
nomination loop waits for so that a restarted dispatcher never decides on a partial picture."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple

import anyio
from kubernetes_asyncio import client, config

from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.watching import BackoffPolicy
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.faults import Fault
from dispatcher_sandbox.harness.registry import FAST, KUEUE, NS, V, mkc, secret
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


@asynccontextmanager
async def clusters(*workers: str) -> AsyncIterator[dict[str, FakeCluster]]:
    """A manager and the named workers, started; each worker is a MultiKueueCluster of the
    manager with its kubeconfig Secret."""
    started = {
        name: FakeCluster(name, resources=KUEUE_SHORT_FORMS) for name in ("manager", *workers)
    }
    for cluster in started.values():
        await cluster.start()
    try:
        async with await config.new_client_from_config_dict(started["manager"].kubeconfig) as api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            await core.create_namespace({"metadata": {"name": NS}})
            for name in workers:
                await core.create_namespaced_secret(
                    NS, secret(f"{name}-kubeconfig", started[name].kubeconfig)
                )
                await custom.create_cluster_custom_object(
                    KUEUE, V, "multikueueclusters", mkc(name, f"{name}-kubeconfig")
                )
        yield started
    finally:
        for cluster in started.values():
            await cluster.stop()


class Seen(NamedTuple):
    """A worker as one notification of the registry found it."""

    cluster: str
    resource: str
    phase: str
    settled: bool
    jobs_listed: bool


class Startup:
    """A registry on the manager, with what each of its notifications found kept in order."""

    def __init__(self) -> None:
        self.registry: ClusterRegistry | None = None
        self.seen: list[Seen] = []
        self._changed = anyio.Event()

    def on_change(self, cluster: str, resource: str, item: object) -> None:
        assert self.registry is not None
        worker = self.registry.workers.get(cluster)
        if worker is not None:
            jobs = worker.mirror is not None and worker.mirror.cache("jobs").synced
            state = worker.state
            self.seen.append(Seen(cluster, resource, state.phase, worker.settled, jobs))
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, holds: Callable[[ClusterRegistry], bool]) -> None:
        assert self.registry is not None
        with anyio.fail_after(10):
            while not holds(self.registry):
                await self._changed.wait()

    @asynccontextmanager
    async def running(self, manager: FakeCluster) -> AsyncIterator[ClusterRegistry]:
        async with await KubeApi.from_kubeconfig(manager.kubeconfig) as manager_api:
            self.registry = ClusterRegistry(
                manager_api,
                kueue_namespace=NS,
                watch_settings=FAST,
                reconnect=BackoffPolicy(0.05, 2, 0.2),
                on_change=self.on_change,
            )
            async with anyio.create_task_group() as group:
                await group.start(self.registry.run)
                yield self.registry
                group.cancel_scope.cancel()


async def test_existing_workers_are_never_reported_unusable_while_listing() -> None:
    startup = Startup()
    async with clusters("good", "down") as started:
        await started["down"].down()  # refuses connections from the start
        async with startup.running(started["manager"]) as registry:
            await startup.until(
                lambda r: (
                    set(r.workers) == {"good", "down"}
                    and all(w.settled for w in r.workers.values())
                )
            )
    assert registry.workers["good"].state.phase == "Connected"
    assert registry.workers["down"].state.phase in ("Connecting", "Disconnected")
    assert registry.workers["down"].state.message  # why: the failed first attempt
    assert startup.seen
    assert all(seen.phase != "Unusable" for seen in startup.seen), startup.seen


async def test_a_connected_worker_settles_only_once_its_jobs_are_listed() -> None:
    """The same-name guard reads a worker's Jobs (an optional resource): a worker whose required
    resources are listed but whose Jobs are not is Connected and not settled, so a restarted
    dispatcher does not decide yet (real Kueue at 3c4c007: a restart nominated the worker where
    a Job of the name was in the way). Its first Jobs list settles it, with a ``connection``
    notification that re-queues the waiting workloads."""
    startup = Startup()
    async with clusters("worker") as started:
        refused = started["worker"].faults.add(
            Fault("error", verbs=("list",), path="/jobs", code=500)
        )
        async with startup.running(started["manager"]) as registry:

            def phase(r: ClusterRegistry) -> str:
                found = r.workers.get("worker")
                return found.state.phase if found is not None else ""

            await startup.until(lambda r: phase(r) == "Connected" and refused.fired > 0)
            assert not registry.workers["worker"].settled
            started["worker"].faults.remove(refused.id)
            await startup.until(lambda r: r.workers["worker"].settled)
    connection = [seen for seen in startup.seen if seen.resource == "connection"]
    settling = next(seen for seen in connection if seen.settled)
    assert (settling.phase, settling.jobs_listed) == ("Connected", True), connection
