"""A small world for nomination-loop tests: a manager and workers served by fake API servers
(Kueue's kinds without their schema, no Kueue emulation, so nothing but the test changes the
MultiKueueCluster ``Active`` condition), the real registry and nomination loop over HTTPS, a
virtual clock for the registry, and counters of what the loop did."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import yaml
from anyio.abc import TaskGroup

from dispatcher.algorithms.model import ClusterSnapshot, Decision, DispatchRequest
from dispatcher.clusters.registry import ClusterRegistry
from dispatcher.controller.config import ControllerConfig
from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.clock import SYSTEM_CLOCK, Clock
from dispatcher.k8s.resources import (
    ADMISSION_CHECKS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    SECRETS,
    WORKLOADS,
)
from dispatcher.k8s.watching import BackoffPolicy, WatchSettings
from dispatcher.telemetry.metrics import Metrics
from dispatcher.topology import multikueue_admission_check
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.harness.scenario import VirtualClock, b64, multikueue_cluster_status
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS

Obj = dict[str, Any]
Decide = Callable[[DispatchRequest, Sequence[ClusterSnapshot]], Decision]
KUEUE = "kueue.x-k8s.io/v1beta2"
NS = "kueue-system"
MERGE = "application/merge-patch+json"
CHECK = "multikueue"
# The production watch loop's timings (backoff 1 s doubling), without the inactivity deadline
# (it runs on real time and would end quiet streams while the virtual clock stands still).
WATCH = WatchSettings(inactivity_timeout=None)


FakeClock = VirtualClock


def workload(
    name: str,
    namespace: str = "default",
    *,
    requests: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A manager Workload of one pod (1 cpu unless ``requests`` says otherwise)."""
    metadata: Obj = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": metadata,
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox",
                                    "resources": {"requests": requests or {"cpu": "1"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


def batch_job(
    name: str, namespace: str = "default", *, labels: dict[str, str] | None = None
) -> Obj:
    """A batch/v1 Job of one busybox container (no status)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
    }


@dataclass
class Reports:
    """What a nominator reported and re-queued for later, captured instead of done."""

    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(reason, message, type) of each Event."""
    requeued: list[float] = field(default_factory=list)
    """The delay of each ``add_after``."""


def capture_reports(nominator: Nominator, setattr_: Callable[[Any, str, Any], None]) -> Reports:
    """Capture ``nominator``'s Events and delayed re-queues (``setattr_``: pytest's
    ``monkeypatch.setattr``, which undoes it after the test)."""
    reports = Reports()
    setattr_(
        nominator.events,
        "record",
        lambda wl, reason, message, kind: reports.events.append((reason, message, kind)),
    )
    setattr_(nominator.queue, "add_after", lambda key, delay: reports.requeued.append(delay))
    return reports


ELIGIBLE_STATUS = {
    "conditions": [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "reserved on the manager",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "admissionChecks": [
        {
            "name": CHECK,
            "state": "Pending",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


def keep_or_first(request: DispatchRequest, snapshots: Sequence[ClusterSnapshot]) -> Decision:
    """A pipeline stand-in: keep the nominated clusters that are still active, else nominate
    the first active cluster (so only a change of activeness can move a nomination)."""
    active = [s.name for s in snapshots if s.active]
    kept = tuple(n for n in request.nominated if n in active)
    chosen = kept or tuple(active[:1])
    return Decision("keep-or-first", chosen, "kept" if kept else "first active cluster")


@dataclass
class World:
    manager: FakeCluster
    workers: dict[str, FakeCluster]
    api: KubeApi
    clock: Clock
    decide: Decide
    config: ControllerConfig
    now: Callable[[], float] | None
    group: TaskGroup
    registry: ClusterRegistry | None = None
    nominator: Nominator | None = None
    metrics: Metrics | None = None
    """Given to the registry and the loop of the next :meth:`start_dispatcher` when set."""
    reconciles: dict[str, int] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)
    """The resourceVersion of each workload its last finished reconcile started from."""
    echoed: dict[str, str] = field(default_factory=dict)
    """Versions the loop skipped as the echo of its own nomination write (no reconcile)."""
    running: int = 0
    changed: anyio.Event = field(default_factory=anyio.Event)
    _scope: anyio.CancelScope | None = None

    def notify(self) -> None:
        event, self.changed = self.changed, anyio.Event()
        event.set()

    async def wait(self, predicate: Callable[[], bool], within: float = 30) -> None:
        """Wait until ``predicate()`` holds, re-checking on every registry change and after
        every reconcile."""
        with anyio.fail_after(within):
            while not predicate():
                await self.changed.wait()

    @property
    def loop(self) -> Nominator:
        assert self.nominator is not None
        return self.nominator

    @property
    def mirrors(self) -> ClusterRegistry:
        assert self.registry is not None
        return self.registry

    def nominated(self, name: str, namespace: str = "default") -> tuple[str, ...]:
        found = self.mirrors.manager.cache("workloads").get(name, namespace) or {}
        return tuple((found.get("status") or {}).get("nominatedClusterNames") or ())

    def idle(self, *names: str, namespace: str = "default") -> bool:
        """No reconcile running or queued, and each named workload's last reconcile saw its
        current version (nothing it could react to is left)."""
        if self.running or len(self.loop.queue) or self.loop.queue.processing:
            return False
        cache = self.mirrors.manager.cache("workloads")
        for name in names:
            if self.loop.awaiting_echo(f"{namespace}/{name}"):
                return False  # a write of the loop has not come back on the watch yet
            current = cache.get(name, namespace) or {}
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            key = f"{namespace}/{name}"
            if version not in (self.seen.get(key), self.echoed.get(key)):
                return False
        return True

    async def add_workload(self, name: str, namespace: str = "default") -> None:
        """A Workload with the status Kueue gives an eligible one (C49)."""
        await self.api.create(WORKLOADS, workload(name, namespace), namespace=namespace)
        await self.api.request(
            "PATCH",
            WORKLOADS.path(namespace, name) + "/status",
            body={"status": ELIGIBLE_STATUS},
            content_type=MERGE,
        )

    async def set_active(self, name: str, active: bool) -> None:
        """Kueue's verdict on the MultiKueueCluster (its ``Active`` condition)."""
        await self.api.request(
            "PATCH",
            MULTIKUEUE_CLUSTERS.path(None, name) + "/status",
            body={"status": multikueue_cluster_status(active)},
            content_type=MERGE,
        )

    async def start_dispatcher(self, *, now: Callable[[], float] | None = None) -> Nominator:
        """A new registry and nomination loop on the same API (a restart when one ran before);
        returns once every worker mirror is connected."""
        world = self

        def on_change(cluster: str, resource: str, item: Any) -> None:
            if world.nominator is not None:
                skipped = world.nominator.echoes_skipped
                world.nominator.on_change(cluster, resource, item)
                if world.nominator.echoes_skipped != skipped:
                    # The echo of the loop's own nomination: handled, nothing to reconcile.
                    meta = item.object["metadata"]
                    world.echoed[f"{meta['namespace']}/{meta['name']}"] = meta["resourceVersion"]
            world.notify()

        registry = ClusterRegistry(
            self.api,
            kueue_namespace=NS,
            watch_settings=WATCH,
            manager_watch_settings=WATCH,
            reconnect=BackoffPolicy(),
            clock=self.clock,
            on_change=on_change,
            metrics=self.metrics,
        )
        nominator = Nominator(
            registry, self.decide, config=self.config, now=now or self.now, metrics=self.metrics
        )
        reconcile = nominator.reconcile

        async def counted(key: str) -> None:
            namespace, _, name = key.partition("/")
            found = registry.manager.cache("workloads").get(name, namespace) or {}
            version = str((found.get("metadata") or {}).get("resourceVersion") or "")
            self.running += 1
            try:
                await reconcile(key)
            finally:
                self.running -= 1
                self.reconciles[key] = self.reconciles.get(key, 0) + 1
                self.seen[key] = version
                self.notify()

        nominator.reconcile = counted  # type: ignore[method-assign]
        self.registry, self.nominator = registry, nominator
        self.reconciles, self.seen, self.echoed = {}, {}, {}
        scope = anyio.CancelScope()
        self._scope = scope

        async def run(
            *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
        ) -> None:
            with scope:
                async with anyio.create_task_group() as inner:
                    await inner.start(registry.run)
                    task_status.started()
                    inner.start_soon(nominator.run)

        await self.group.start(run)
        await self.wait(
            lambda: all(
                registry.workers.get(n) is not None and registry.workers[n].connected
                for n in self.workers
            )
        )
        return nominator

    def stop_dispatcher(self) -> None:
        """Cancel the running registry and loop (the process is gone; its memory with it)."""
        if self._scope is not None:
            self._scope.cancel()
        self.registry, self.nominator, self._scope = None, None, None


async def _register_worker(api: KubeApi, name: str, worker: FakeCluster) -> None:
    await api.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-kubeconfig", "namespace": NS},
            "data": {"kubeconfig": b64(yaml.safe_dump(worker.kubeconfig))},
        },
        namespace=NS,
    )
    await api.create(
        MULTIKUEUE_CLUSTERS,
        {
            "apiVersion": KUEUE,
            "kind": "MultiKueueCluster",
            "metadata": {"name": name},
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"location": f"{name}-kubeconfig", "locationType": "Secret"}
                }
            },
        },
    )


@contextlib.asynccontextmanager
async def world(
    *,
    decide: Decide = keep_or_first,
    workers: Sequence[str] = ("w1", "w2"),
    clock: Clock = SYSTEM_CLOCK,
    config: ControllerConfig | None = None,
    now: Callable[[], float] | None = None,
) -> AsyncIterator[World]:
    """The manager, its workers (registered and reported Active by "Kueue", in that order in
    one MultiKueueConfig) and an AdmissionCheck; no dispatcher yet (:meth:`World.start_dispatcher`).

    The default config re-reconciles nothing by itself within a test (``resync_seconds`` of an
    hour): every reconcile counted was caused by a change."""
    async with contextlib.AsyncExitStack() as stack:
        manager = await stack.enter_async_context(
            FakeCluster("manager", resources=KUEUE_SHORT_FORMS)
        )
        clusters = {
            name: await stack.enter_async_context(FakeCluster(name, resources=KUEUE_SHORT_FORMS))
            for name in workers
        }
        api = await stack.enter_async_context(
            await KubeApi.from_kubeconfig(manager.kubeconfig, name="manager")
        )
        await api.create(NAMESPACES, {"metadata": {"name": NS}})
        for name, cluster in clusters.items():
            await _register_worker(api, name, cluster)
        await api.create(
            MULTIKUEUE_CONFIGS,
            {
                "apiVersion": KUEUE,
                "kind": "MultiKueueConfig",
                "metadata": {"name": CHECK},
                "spec": {"clusters": list(workers)},
            },
        )
        await api.create(
            ADMISSION_CHECKS,
            multikueue_admission_check(CHECK, CHECK),
        )
        async with anyio.create_task_group() as group:
            found = World(
                manager,
                clusters,
                api,
                clock,
                decide,
                config or ControllerConfig(resync_seconds=3600.0, sync_grace_seconds=10.0),
                now,
                group,
            )
            for name in workers:
                await found.set_active(name, True)
            yield found
            group.cancel_scope.cancel()
