"""A manager and workers on fake API servers, with the emulated MultiKueue controllers running.

Everything is set up and driven through the API with kubernetes_asyncio clients, as upstream's
integration suite does (C81): worker kubeconfig Secrets in ``kueue-system`` on the manager,
MultiKueueClusters, a MultiKueueConfig, the MultiKueue AdmissionCheck, and a manager
ClusterQueue and LocalQueue that use it. Until the Kueue core runs in these tests, quota
reservation on the manager and admission on the workers are faked exactly as upstream's
``util.SetQuotaReservation`` does: the test writes ``QuotaReserved``/``status.admission`` (and the
check ``Pending``) itself, as ``kueue-admission`` with the full admission-status body (C42).

As on a real manager, Kueue's workload webhook rule on ``clusterName`` (C18:
``kueue_cluster_name_webhook``, only a cluster of the *old* nomination may be set) is always on,
and every Workload :meth:`Env.create_workload` makes belongs to a job, as the batch/Job
integration would make it: a suspended ``batch/v1`` Job managed by MultiKueue
(``spec.managedBy: kueue.x-k8s.io/multikueue``) is created first and owns the Workload
(``ownerReferences``, ``controller: true``). Kueue rejects Workloads without such an owner (C22).
Tests that run the Kueue core and evict also run the Job adapter (``jobs=True``): Kueue gives an
evicted Job's Workload its quota back from the Job reconciler (issue 14 item 6).

The harness shortens Kueue's remote-event batch period to 5 ms (``batch_period_seconds``, C20)
so that tests run fast; the worker clients keep Kueue's own rate limit (C10).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher_sandbox.fake_apiserver.admission import (
    kueue_clear_nominated_cluster_names_hook,
    kueue_cluster_name_webhook,
)
from dispatcher_sandbox.fake_apiserver.kubeconfig import dump
from dispatcher_sandbox.fake_apiserver.registry import Resource, resource_from_crd
from dispatcher_sandbox.fake_apiserver.server import FakeCluster, load_crd_documents
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS, kueue_crds_dir
from dispatcher_sandbox.kueue_emulator.core import CoreKueue
from dispatcher_sandbox.kueue_emulator.jobs import JobAdapter
from dispatcher_sandbox.kueue_emulator.multikueue import MultiKueueManager, SyncRemoteJob
from dispatcher_sandbox.kueue_emulator.runtime import (
    ClusterConnection,
    KueueConfig,
    ManualClock,
    admission_status_body,
)

Obj = dict[str, Any]

KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
KUEUE_NS = "kueue-system"
NS = "team-a"
CHECK = "mk-check"
MK_CONFIG = "mk-config"
CQ = "cq"
LQ = "lq"
FLAVOR = "default-flavor"
DISPATCHER = "my-dispatcher"
EXTERNAL = "example.com/custom-mk-dispatcher"
KUEUE_ADMISSION = "kueue-admission"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DEADLINE = 10.0


@functools.cache
def _crd_resources() -> tuple[Resource, ...] | None:
    """The Kueue CRDs, parsed and compiled once per session (registering them is read-only)."""
    path = kueue_crds_dir()
    if path is None:
        return None
    return tuple(resource_from_crd(doc) for doc in load_crd_documents(path))


def new_cluster(name: str) -> FakeCluster:
    """A fake cluster with the real Kueue v0.19.2 CRDs when present (schemas and CEL enforced)."""
    resources = _crd_resources()
    return FakeCluster(name, resources=resources if resources is not None else KUEUE_SHORT_FORMS)


def ts(seconds: float = 0.0) -> str:
    """RFC 3339 at ``T0 + seconds`` (the ManualClock's start)."""
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(kind: str, status: bool = True, reason: str | None = None, at: str | None = None) -> Obj:
    """A condition with every required field (C13)."""
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason or kind,
        "message": f"{kind} by the test",
        "lastTransitionTime": at or ts(),
    }


def set_cond(status: Obj, new: Obj) -> None:
    """Replace or add a condition in a status dict."""
    conditions = [c for c in status.get("conditions") or [] if c["type"] != new["type"]]
    status["conditions"] = [*conditions, new]


def get_cond(obj: Obj | None, kind: str) -> Obj | None:
    """A condition of an object, if present."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            found: Obj = item
            return found
    return None


def check_state(obj: Obj | None, name: str = CHECK) -> Obj | None:
    """The admission check entry of that name."""
    for item in ((obj or {}).get("status") or {}).get("admissionChecks") or []:
        if item.get("name") == name:
            found: Obj = item
            return found
    return None


JOB_MANAGED_BY = "kueue.x-k8s.io/multikueue"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"


def job_body(name: str, *, cpu: str = "1", managed_by: str | None = JOB_MANAGED_BY) -> Obj:
    """The suspended manager Job a harness Workload belongs to (C22: managed by MultiKueue).

    The harness makes the Workload itself, so the Job names it as its prebuilt Workload
    (``kueue.x-k8s.io/prebuilt-workload-name``): a Job adapter running on the manager
    (``jobs=True``) adopts it, as Kueue's Job integration does, instead of making a second one;
    the pod template matches the Workload's pod set."""
    labels = {"app": name, QUEUE_NAME_LABEL: LQ, PREBUILT_WORKLOAD_LABEL: name}
    spec: Obj = {"suspend": True}
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
                    ],
                }
            },
        },
    }


def job_owner(job: Obj) -> Obj:
    """The owner reference the batch/Job integration puts on a Job's Workload."""
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload_body(
    name: str, *, cpu: str = "1", owners: list[Obj] | None = None, priority: int | None = None
) -> Obj:
    """A v1beta2 Workload in the test namespace, queued to the LocalQueue ``lq``."""
    body: Obj = {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "queueName": LQ,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": cpu}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    if owners:
        body["metadata"]["ownerReferences"] = owners
    if priority is not None:
        body["spec"]["priority"] = priority
    return body


def _admission(cpu: str = "1") -> Obj:
    return {
        "clusterQueue": CQ,
        "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": FLAVOR}, "resourceUsage": {"cpu": cpu}, "count": 1}
        ],
    }


async def eventually(
    probe: Callable[[], Awaitable[bool]], *, deadline: float = DEADLINE, what: str = ""
) -> None:
    """Poll ``probe`` (API reads, so no event to wait on) until it holds, under a deadline."""
    try:
        with anyio.fail_after(deadline):
            while not await probe():  # noqa: ASYNC110 - polling remote API state
                await anyio.sleep(0.02)
    except TimeoutError as error:
        raise AssertionError(f"timed out waiting for {what or probe}") from error


@dataclass
class Env:
    """The running clusters, API clients and the manager's MultiKueue controllers."""

    manager: FakeCluster
    workers: dict[str, FakeCluster]
    api: client.ApiClient
    worker_apis: dict[str, client.ApiClient]
    config: KueueConfig
    clock: ManualClock
    sync_remote_job: SyncRemoteJob | None = None
    reconnect_base_seconds: float = 0.02
    with_core: bool = False
    with_jobs: bool = False
    mk: MultiKueueManager | None = None
    conn: ClusterConnection | None = None
    manager_core: CoreKueue | None = None
    manager_jobs: JobAdapter | None = None
    worker_cores: dict[str, CoreKueue] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _worker_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _worker_conns: list[ClusterConnection] = field(default_factory=list)
    _controllers: list[Any] = field(default_factory=list)

    # --- controllers -----------------------------------------------------------------------

    async def start_controllers(self) -> MultiKueueManager:
        """Start the manager's Kueue (MultiKueue, and the core and Job adapter if asked)."""
        conn = ClusterConnection("manager", self.manager.kubeconfig, [])
        core = CoreKueue(conn, self.config, self.clock, role="manager") if self.with_core else None
        jobs = JobAdapter(conn, self.config, self.clock, role="manager") if self.with_jobs else None
        mk = MultiKueueManager(
            conn,
            self.config,
            self.clock,
            sync_remote_job=self.sync_remote_job or (jobs.sync_remote_job if jobs else None),
            remove_remote_job=jobs.remove_remote_job if jobs else None,
            reconnect_base_seconds=self.reconnect_base_seconds,
        )
        loop = asyncio.get_running_loop()
        runners = [conn.run, mk.run] + [c.run for c in (core, jobs) if c is not None]
        self._tasks = [loop.create_task(run()) for run in runners]
        self._controllers = [c for c in (core, jobs) if c is not None]
        self.conn, self.mk, self.manager_core, self.manager_jobs = conn, mk, core, jobs
        with anyio.fail_after(DEADLINE):
            await conn.wait_synced()
        return mk

    async def start_workers(self) -> None:
        """Run Kueue's core (and the Job adapter if asked) on every worker (C72)."""
        loop = asyncio.get_running_loop()
        for name, fake in self.workers.items():
            conn = ClusterConnection(name, fake.kubeconfig, CoreKueue.RESOURCES)
            core = CoreKueue(conn, self.config, self.clock, role="worker")
            self.worker_cores[name] = core
            runners = [conn.run, core.run]
            self._controllers.append(core)
            if self.with_jobs:
                jobs = JobAdapter(conn, self.config, self.clock, role="worker")
                runners.append(jobs.run)
                self._controllers.append(jobs)
            self._worker_conns.append(conn)
            self._worker_tasks += [loop.create_task(run()) for run in runners]

    @staticmethod
    async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_controllers(self) -> None:
        """Stop the manager's Kueue (a manager restart, S12)."""
        await self._cancel(self._tasks)
        self._tasks = []
        for controller in (self.manager_core, self.manager_jobs):
            if controller is not None:
                controller.cancel_timers()
        if self.conn is not None:
            await self.conn.close()
        self.conn = self.mk = self.manager_core = self.manager_jobs = None

    async def stop_workers(self) -> None:
        """Stop the workers' Kueue."""
        await self._cancel(self._worker_tasks)
        self._worker_tasks = []
        for controller in self._controllers:
            controller.cancel_timers()
        for conn in self._worker_conns:
            await conn.close()
        self._worker_conns = []

    @property
    def controllers(self) -> MultiKueueManager:
        """The running MultiKueueManager."""
        assert self.mk is not None
        return self.mk

    async def settle(self) -> None:
        """Wait until the workload controller has nothing left to do for what it has seen."""
        mk = self.controllers

        async def idle() -> bool:
            return mk.workloads.idle.is_set() and not mk.workloads.pending

        await eventually(idle, what="an idle workload controller")

    async def remote_seen(self, name: str, workers: Iterable[str]) -> None:
        """Wait until Kueue's remote informers of ``workers`` hold the copy of ``name``: its
        ADDED event was delivered, so the reconcile it queues (C20, after the batch period) is
        one :meth:`settle` then waits for. ``wait_copies`` reads the workers' API servers, which
        can be ahead of those informers under load."""
        wanted = list(workers)

        async def probe() -> bool:
            remotes = self.controllers.clusters.remotes
            return all(
                w in remotes and remotes[w].workloads.get(name, NS) is not None for w in wanted
            )

        await eventually(probe, what=f"Kueue's informers of {wanted} to hold the copy of {name}")

    async def seen(self, name: str, resource_version: str) -> None:
        """Wait until the manager informer has seen at least that version of a Workload."""
        conn = self.conn
        assert conn is not None
        from dispatcher_sandbox.kube_client import WORKLOADS

        async def probe() -> bool:
            cached = conn.cache(WORKLOADS).get(name, NS)
            return cached is not None and int(cached["metadata"]["resourceVersion"]) >= int(
                resource_version
            )

        await eventually(probe, what=f"the controller to see {name}@{resource_version}")

    # --- objects ---------------------------------------------------------------------------

    def objects(self, cluster: str | None = None) -> client.CustomObjectsApi:
        """A CustomObjectsApi for the manager (None) or a worker."""
        return client.CustomObjectsApi(self.api if cluster is None else self.worker_apis[cluster])

    async def get(self, name: str, cluster: str | None = None) -> Obj | None:
        """A Workload on the manager (None) or a worker, or None."""
        try:
            found: Obj = await self.objects(cluster).get_namespaced_custom_object(
                KUEUE, V1BETA2, NS, "workloads", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    async def get_cluster_object(self, plural: str, name: str) -> Obj:
        """A cluster-scoped Kueue object on the manager."""
        found: Obj = await self.objects().get_cluster_custom_object(KUEUE, V1BETA2, plural, name)
        return found

    async def create_job(self, name: str, *, cpu: str = "1", cluster: str | None = None) -> Obj:
        """Create a suspended Job (see :func:`job_body`): on the manager managed by MultiKueue,
        on a worker (``cluster``) a local Job of that worker."""
        api = self.api if cluster is None else self.worker_apis[cluster]
        body = job_body(name, cpu=cpu, managed_by=JOB_MANAGED_BY if cluster is None else None)
        created = await client.BatchV1Api(api).create_namespaced_job(
            NS,
            body,  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
            _preload_content=False,
        )
        job: Obj = json.loads(await created.read())  # type: ignore[attr-defined]  # raw answer
        return job

    async def create_workload(
        self,
        name: str,
        *,
        cpu: str = "1",
        owners: list[Obj] | None = None,
        priority: int | None = None,
        cluster: str | None = None,
    ) -> Obj:
        """Create a Workload on the manager (or on a worker, ``cluster``), owned by a new Job of
        the same name (C22) unless ``owners`` says otherwise."""
        if owners is None:
            owners = [job_owner(await self.create_job(name, cpu=cpu, cluster=cluster))]
        body = workload_body(name, cpu=cpu, owners=owners, priority=priority)
        created: Obj = await self.objects(cluster).create_namespaced_custom_object(
            KUEUE, V1BETA2, NS, "workloads", body
        )
        return created

    async def kueue_apply(self, name: str, status: Obj, cluster: str | None = None) -> Obj:
        """Apply a full admission-status body as ``kueue-admission`` (C42), like the core."""
        body = {
            "apiVersion": f"{KUEUE}/{V1BETA2}",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": NS},
            "status": admission_status_body(status),
        }
        result: Obj = await self.objects(cluster).patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE,
            V1BETA2,
            NS,
            "workloads",
            name,
            body,
            field_manager=KUEUE_ADMISSION,
            force=True,
            _content_type=APPLY,
        )
        return result

    async def reserve_quota(
        self, name: str, *, checks: Sequence[tuple[str, str]] = ((CHECK, "Pending"),)
    ) -> Obj:
        """Fake the manager's quota reservation (``util.SetQuotaReservation``, C81)."""
        current = await self.get(name)
        assert current is not None
        status = copy.deepcopy(current.get("status") or {})
        status["admission"] = _admission()
        set_cond(status, cond("QuotaReserved", at=ts(self.elapsed)))
        evicted = get_cond(current, "Evicted")
        if evicted is not None and evicted["status"] == "True":
            set_cond(status, cond("Evicted", False, "QuotaReserved", at=ts(self.elapsed)))
        status["admissionChecks"] = [
            {"name": c, "state": s, "message": "", "lastTransitionTime": ts(self.elapsed)}
            for c, s in checks
        ]
        return await self.kueue_apply(name, status)

    async def release_quota(self, name: str) -> Obj:
        """Fake the core releasing the manager reservation (QuotaReserved=False)."""
        current = await self.get(name)
        assert current is not None
        status = copy.deepcopy(current.get("status") or {})
        status.pop("admission", None)
        set_cond(status, cond("QuotaReserved", False, "Pending", at=ts(self.elapsed)))
        return await self.kueue_apply(name, status)

    async def evict_on_manager(self, name: str) -> Obj:
        """Fake the core's check-based eviction and its reset (C37, C38)."""
        current = await self.get(name)
        assert current is not None
        status = copy.deepcopy(current.get("status") or {})
        status.pop("admission", None)
        status.pop("clusterName", None)
        status.pop("nominatedClusterNames", None)
        now = ts(self.elapsed)
        set_cond(status, cond("Evicted", True, "AdmissionCheck", at=now))
        set_cond(status, cond("QuotaReserved", False, "Pending", at=now))
        set_cond(status, cond("Admitted", False, "NoReservation", at=now))
        for entry in status.get("admissionChecks") or []:
            entry.update({"state": "Pending", "message": "Reset to Pending after eviction"})
            entry["lastTransitionTime"] = now
        return await self.kueue_apply(name, status)

    async def set_checks(self, name: str, checks: Sequence[tuple[str, str]]) -> Obj:
        """Set admission check states (as the core or another check controller would)."""
        current = await self.get(name)
        assert current is not None
        status = copy.deepcopy(current.get("status") or {})
        status["admissionChecks"] = [
            {"name": c, "state": s, "message": "", "lastTransitionTime": ts(self.elapsed)}
            for c, s in checks
        ]
        return await self.kueue_apply(name, status)

    async def nominate(
        self, name: str, clusters: list[str], *, field_manager: str = DISPATCHER
    ) -> Obj:
        """The dispatcher's forced apply of ``status.nominatedClusterNames`` (C48)."""
        body = {
            "apiVersion": f"{KUEUE}/{V1BETA2}",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": NS},
            "status": {"nominatedClusterNames": clusters},
        }
        result: Obj = await self.objects().patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE,
            V1BETA2,
            NS,
            "workloads",
            name,
            body,
            field_manager=field_manager,
            force=True,
            _content_type=APPLY,
        )
        return result

    async def worker_admit(self, cluster: str, name: str, *, at: float | None = None) -> Obj:
        """Fake the worker's Kueue admitting its copy: QuotaReserved, admission, Admitted."""
        current = await self.get(name, cluster)
        assert current is not None, f"no copy of {name} on {cluster}"
        status = copy.deepcopy(current.get("status") or {})
        when = ts(self.elapsed if at is None else at)
        status["admission"] = _admission()
        set_cond(status, cond("QuotaReserved", at=when))
        set_cond(status, cond("Admitted", at=when))
        return await self.kueue_apply(name, status, cluster)

    async def worker_condition(self, cluster: str, name: str, *conditions: Obj) -> Obj:
        """Set conditions on a worker's copy (eviction, finish), as the worker's Kueue would."""
        current = await self.get(name, cluster)
        assert current is not None
        status = copy.deepcopy(current.get("status") or {})
        for item in conditions:
            set_cond(status, item)
        if any(c["type"] == "Evicted" and c["status"] == "True" for c in conditions):
            status.pop("admission", None)
            set_cond(status, cond("QuotaReserved", False, "Pending", at=ts(self.elapsed)))
            set_cond(status, cond("Admitted", False, "NoReservation", at=ts(self.elapsed)))
        return await self.kueue_apply(name, status, cluster)

    async def copies(self, name: str) -> set[str]:
        """The reachable workers that hold a copy of the Workload now."""
        return {
            w
            for w, fake in self.workers.items()
            if fake.is_up and await self.get(name, w) is not None
        }

    async def wait_copies(self, name: str, expected: Iterable[str]) -> None:
        """Wait until exactly these workers hold a copy."""
        wanted = set(expected)

        async def probe() -> bool:
            return await self.copies(name) == wanted

        await eventually(probe, what=f"copies of {name} on exactly {sorted(wanted)}")

    async def wait_workload(
        self,
        name: str,
        predicate: Callable[[Obj], bool],
        cluster: str | None = None,
        *,
        deadline: float = DEADLINE,
    ) -> Obj:
        """Wait until the Workload satisfies ``predicate``; return it."""
        seen: list[Obj] = []

        async def probe() -> bool:
            obj = await self.get(name, cluster)
            if obj is not None and predicate(obj):
                seen.append(obj)
                return True
            return False

        await eventually(
            probe, deadline=deadline, what=f"{name} on {cluster or 'manager'} to match"
        )
        return seen[-1]

    @property
    def elapsed(self) -> float:
        """Seconds the ManualClock has advanced since T0."""
        return (self.clock.now() - T0).total_seconds()

    async def condition_of(self, plural: str, name: str, kind: str = "Active") -> Obj | None:
        """A condition of a cluster-scoped Kueue object on the manager."""
        return get_cond(await self.get_cluster_object(plural, name), kind)

    async def wait_condition(
        self,
        plural: str,
        name: str,
        status: str,
        reason: str,
        kind: str = "Active",
        message: str | None = None,
    ) -> Obj:
        """Wait for a condition (and message, if given) of a cluster-scoped object; return it."""
        found: list[Obj] = []

        async def probe() -> bool:
            current = await self.condition_of(plural, name, kind)
            if (
                current
                and current["status"] == status
                and current["reason"] == reason
                and message in (None, current["message"])
            ):
                found.append(current)
                return True
            return False

        await eventually(probe, what=f"{plural}/{name} {kind}={status}/{reason}")
        return found[-1]

    async def wait_active(self, names: Iterable[str] | None = None) -> None:
        """Wait until the MultiKueueClusters are Active=True."""
        for name in names if names is not None else self.workers:
            await self.wait_condition("multikueueclusters", name, "True", "Active")

    async def events(self, name: str) -> list[Obj]:
        """The core/v1 Events on a manager Workload."""
        listed = await client.CoreV1Api(self.api).list_namespaced_event(NS)
        return [
            self.api.sanitize_for_serialization(e)
            for e in listed.items
            if e.involved_object.name == name
        ]

    async def set_config_clusters(self, clusters: list[str]) -> None:
        """Change ``MultiKueueConfig.spec.clusters``."""
        await self.objects().patch_cluster_custom_object(  # type: ignore[call-arg]  # kubernetes_asyncio takes a dict body as well
            KUEUE,
            V1BETA2,
            "multikueueconfigs",
            MK_CONFIG,
            {"spec": {"clusters": clusters}},
            _content_type=MERGE,
        )

    async def put_secret(self, name: str, data: dict[str, str]) -> None:
        """Create or replace a Secret in ``kueue-system`` on the manager (stringData)."""
        core = client.CoreV1Api(self.api)
        body = {"metadata": {"name": name, "namespace": KUEUE_NS}, "stringData": data}
        try:
            await core.create_namespaced_secret(KUEUE_NS, body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
        except ApiException as error:
            if error.status != 409:
                raise
            await core.replace_namespaced_secret(name, KUEUE_NS, body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well

    async def create_mkc(self, name: str, location: str, location_type: str = "Secret") -> None:
        """Create a MultiKueueCluster pointing at a kubeconfig."""
        await self.objects().create_cluster_custom_object(
            KUEUE,
            V1BETA2,
            "multikueueclusters",
            {
                "apiVersion": f"{KUEUE}/{V1BETA2}",
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {
                    "clusterSource": {
                        "kubeConfig": {"location": location, "locationType": location_type}
                    }
                },
            },
        )


async def _create(api: client.ApiClient, objs: Iterable[tuple[str, Obj]]) -> None:
    """Create namespaces and Kueue objects through the API."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    for plural, body in objs:
        if plural == "namespaces":
            with contextlib.suppress(ApiException):
                await core.create_namespace(body)  # type: ignore[arg-type]  # kubernetes_asyncio takes a dict body as well
        elif plural in ("localqueues",):
            await custom.create_namespaced_custom_object(
                KUEUE, V1BETA2, body["metadata"]["namespace"], plural, body
            )
        else:
            await custom.create_cluster_custom_object(KUEUE, V1BETA2, plural, body)


def _kueue(kind: str, name: str, spec: Obj, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": f"{KUEUE}/{V1BETA2}", "kind": kind, "metadata": meta, "spec": spec}


def _queues(checks: Sequence[str], cpu: str = "100") -> list[tuple[str, Obj]]:
    cq_spec: Obj = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
            }
        ],
    }
    if checks:
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return [
        ("namespaces", {"metadata": {"name": NS}}),
        ("resourceflavors", _kueue("ResourceFlavor", FLAVOR, {})),
        ("clusterqueues", _kueue("ClusterQueue", CQ, cq_spec)),
        ("localqueues", _kueue("LocalQueue", LQ, {"clusterQueue": CQ}, NS)),
    ]


@contextlib.asynccontextmanager
async def start_env(
    *,
    workers: Sequence[str] = ("worker1", "worker2"),
    config_clusters: Sequence[str] | None = None,
    dispatcher_name: str = EXTERNAL,
    policy_hook: bool = False,
    merge_patch_gate: bool = False,
    start: bool = True,
    wait_active: bool = True,
    extra_checks: Sequence[str] = (),
    sync_remote_job: SyncRemoteJob | None = None,
    core: bool = False,
    jobs: bool = False,
    worker_cpu: dict[str, str] | None = None,
    manager_cpu: str = "100",
    **settings: Any,
) -> AsyncIterator[Env]:
    """Start a manager and workers, create the MultiKueue setup through the API, run MultiKueue.

    ``core``: run the emulated Kueue core on the manager and on every worker instead of faking
    reservation and admission; ``jobs``: also the batch/Job adapter (its MultiKueue hooks wired
    in). ``worker_cpu``/``manager_cpu``: ClusterQueue cpu quotas (default 100).
    ``settings`` go to :class:`KueueConfig` (e.g. ``incremental_step_size``).
    """
    manager = new_cluster("manager")
    fakes = {name: new_cluster(name) for name in workers}
    if policy_hook:
        manager.admission.add_mutating(kueue_clear_nominated_cluster_names_hook())
    manager.admission.add_validating(kueue_cluster_name_webhook())  # C18, as on every manager
    started: list[FakeCluster] = []
    apis: list[client.ApiClient] = []
    env: Env | None = None
    try:
        for fake in [manager, *fakes.values()]:
            await fake.start()
            started.append(fake)
        api = await config.new_client_from_config_dict(manager.kubeconfig)
        apis.append(api)
        worker_apis = {}
        for name, fake in fakes.items():
            worker_apis[name] = await config.new_client_from_config_dict(fake.kubeconfig)
            apis.append(worker_apis[name])
        settings.setdefault("batch_period_seconds", 0.005)  # C20: Kueue's is 1 s
        kueue_config = KueueConfig(
            dispatcher_name=dispatcher_name, merge_patch_gate=merge_patch_gate, **settings
        )
        env = Env(
            manager,
            fakes,
            api,
            worker_apis,
            kueue_config,
            ManualClock(T0),
            sync_remote_job=sync_remote_job,
            with_core=core,
            with_jobs=jobs,
        )
        await _create(api, [("namespaces", {"metadata": {"name": KUEUE_NS}})])
        for name, fake in fakes.items():
            await env.put_secret(f"{name}-kubeconfig", {"kubeconfig": dump(fake.kubeconfig)})
            await env.create_mkc(name, f"{name}-kubeconfig")
        clusters = list(config_clusters if config_clusters is not None else workers)
        setup: list[tuple[str, Obj]] = [
            ("multikueueconfigs", _kueue("MultiKueueConfig", MK_CONFIG, {"clusters": clusters})),
            (
                "admissionchecks",
                _kueue(
                    "AdmissionCheck",
                    CHECK,
                    {
                        "controllerName": "kueue.x-k8s.io/multikueue",
                        "parameters": {
                            "apiGroup": KUEUE,
                            "kind": "MultiKueueConfig",
                            "name": MK_CONFIG,
                        },
                    },
                ),
            ),
            *[
                (
                    "admissionchecks",
                    _kueue("AdmissionCheck", c, {"controllerName": "example.com/other"}),
                )
                for c in extra_checks
            ],
        ]
        await _create(api, [*setup, *_queues([CHECK, *extra_checks], manager_cpu)])
        for name, worker_api in worker_apis.items():
            await _create(worker_api, _queues([], (worker_cpu or {}).get(name, "100")))
        if core:
            await env.start_workers()
        if start:
            await env.start_controllers()
            if wait_active:
                await env.wait_active()
        yield env
    finally:
        if env is not None:
            await env.stop_controllers()
            await env.stop_workers()
        for api_client in apis:
            await api_client.close()
        for fake in reversed(started):
            await fake.stop()
