"""The registry at start-up: no verdict on a worker before the manager's caches are listed, and
each worker reports when its first connection attempt has an outcome (``settled``), which the
nomination loop waits for so that a restarted dispatcher never decides on a partial picture."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from kubernetes_asyncio import client, config

from dispatcher.clusters.registry import ClusterRegistry, WorkerState
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.watching import BackoffPolicy
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.fake_apiserver.faults import Fault
from dispatcher_sandbox.harness.registry import FAST, KUEUE, NS, V, mkc, secret
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS


async def test_existing_workers_are_never_reported_unusable_while_listing() -> None:
    manager = FakeCluster("manager", resources=KUEUE_SHORT_FORMS)
    good = FakeCluster("good", resources=KUEUE_SHORT_FORMS)
    down = FakeCluster("down", resources=KUEUE_SHORT_FORMS)
    for cluster in (manager, good, down):
        await cluster.start()
    try:
        api = await config.new_client_from_config_dict(manager.kubeconfig)
        async with api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            await core.create_namespace({"metadata": {"name": NS}})
            for worker in (good, down):
                await core.create_namespaced_secret(
                    NS, secret(f"{worker.name}-kubeconfig", worker.kubeconfig)
                )
                await custom.create_cluster_custom_object(
                    KUEUE, V, "multikueueclusters", mkc(worker.name, f"{worker.name}-kubeconfig")
                )
            await down.down()  # refuses connections from the start
            seen: list[tuple[str, WorkerState, bool]] = []
            changed = anyio.Event()
            registry: ClusterRegistry

            def on_change(cluster: str, resource: str, item: object) -> None:
                nonlocal changed
                worker = registry.workers.get(cluster)
                if worker is not None:
                    seen.append((cluster, worker.state, worker.settled))
                changed.set()
                changed = anyio.Event()

            async with await KubeApi.from_kubeconfig(manager.kubeconfig) as manager_api:
                registry = ClusterRegistry(
                    manager_api,
                    kueue_namespace=NS,
                    watch_settings=FAST,
                    reconnect=BackoffPolicy(0.05, 2, 0.2),
                    on_change=on_change,
                )
                async with anyio.create_task_group() as group:
                    await group.start(registry.run)
                    with anyio.fail_after(10):
                        while not (
                            set(registry.workers) == {"good", "down"}
                            and all(w.settled for w in registry.workers.values())
                        ):
                            await changed.wait()
                    group.cancel_scope.cancel()
            assert registry.workers["good"].state.phase == "Connected"
            assert registry.workers["down"].state.phase in ("Connecting", "Disconnected")
            assert registry.workers["down"].state.message  # why: the failed first attempt
            assert all(state.phase != "Unusable" for _, state, _ in seen), seen
    finally:
        for cluster in (good, down, manager):
            await cluster.stop()


async def test_a_connected_worker_settles_only_once_its_jobs_are_listed() -> None:
    """The same-name guard reads a worker's Jobs (an optional resource): a worker whose required
    resources are listed but whose Jobs are not is Connected and not settled, so a restarted
    dispatcher does not decide yet (real Kueue at 3c4c007: a restart nominated the worker where
    a Job of the name was in the way). Its first Jobs list settles it, with a ``connection``
    notification that re-queues the waiting workloads."""
    manager = FakeCluster("manager", resources=KUEUE_SHORT_FORMS)
    worker = FakeCluster("worker", resources=KUEUE_SHORT_FORMS)
    for cluster in (manager, worker):
        await cluster.start()
    try:
        api = await config.new_client_from_config_dict(manager.kubeconfig)
        async with api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            await core.create_namespace({"metadata": {"name": NS}})
            await core.create_namespaced_secret(NS, secret("worker-kubeconfig", worker.kubeconfig))
            await custom.create_cluster_custom_object(
                KUEUE, V, "multikueueclusters", mkc("worker", "worker-kubeconfig")
            )
        refused = worker.faults.add(Fault("error", verbs=("list",), path="/jobs", code=500))
        notified: list[tuple[str, bool, bool]] = []
        changed = anyio.Event()
        registry: ClusterRegistry

        def on_change(cluster: str, resource: str, item: object) -> None:
            nonlocal changed
            found = registry.workers.get(cluster)
            if found is not None and resource == "connection":
                jobs = found.mirror is not None and found.mirror.cache("jobs").synced
                notified.append((found.state.phase, found.settled, jobs))
            changed.set()
            changed = anyio.Event()

        async def until(holds: Callable[[], bool]) -> None:
            with anyio.fail_after(10):
                while not holds():
                    await changed.wait()

        def phase() -> str:
            found = registry.workers.get("worker")
            return found.state.phase if found is not None else ""

        async with await KubeApi.from_kubeconfig(manager.kubeconfig) as manager_api:
            registry = ClusterRegistry(
                manager_api,
                kueue_namespace=NS,
                watch_settings=FAST,
                reconnect=BackoffPolicy(0.05, 2, 0.2),
                on_change=on_change,
            )
            async with anyio.create_task_group() as group:
                await group.start(registry.run)
                await until(lambda: phase() == "Connected" and refused.fired > 0)
                assert not registry.workers["worker"].settled
                worker.faults.remove(refused.id)
                await until(lambda: registry.workers["worker"].settled)
                group.cancel_scope.cancel()
        settling = [n for n in notified if n[1]]
        assert settling[0] == ("Connected", True, True), notified
        assert not any(settled for _, settled, _ in notified[: notified.index(settling[0])])
    finally:
        for cluster in (worker, manager):
            await cluster.stop()
