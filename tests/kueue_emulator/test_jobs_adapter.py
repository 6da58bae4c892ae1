"""Kueue's batch/Job integration, emulated (issue 3, scope 6): Jobs as the entry point.

Each test names the contract point (C…) or scenario (S…) it shows. Everything is driven through
the API with kubernetes_asyncio clients. The Kueue core does not run here: admission is written
onto the Workload's status by the test, as upstream's integration suites do with
``util.SetQuotaReservation`` (C81), through the real CRDs when they are available.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiClient

from dispatcher_sandbox.fake_apiserver.server import FakeCluster, load_crd_documents
from dispatcher_sandbox.kube_client import WORKLOADS, KubeClient
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS, kueue_crds_dir
from dispatcher_sandbox.kueue_emulator.core import CoreKueue
from dispatcher_sandbox.kueue_emulator.jobs import (
    JOB_UID_LABEL,
    RESOURCE_IN_USE_FINALIZER,
    RUN_SECONDS_ANNOTATION,
    JobAdapter,
    workload_key_for,
    workload_name_for_job,
    workload_name_for_owner,
)
from dispatcher_sandbox.kueue_emulator.multikueue import MultiKueueManager
from dispatcher_sandbox.kueue_emulator.runtime import (
    ORIGIN_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL,
    ClusterConnection,
    KueueConfig,
    SystemClock,
)

pytestmark = pytest.mark.anyio

Obj = dict[str, Any]
T = TypeVar("T")

KUEUE = "kueue.x-k8s.io"
V1BETA2 = "v1beta2"
MERGE = "application/merge-patch+json"
NS = "default"
GPU_LABEL = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
DEADLINE = 10.0


@functools.cache
def _crd_documents() -> tuple[Obj, ...] | None:
    path = kueue_crds_dir()
    return tuple(load_crd_documents(path)) if path is not None else None


def new_cluster(name: str) -> FakeCluster:
    """A fake cluster with the real Kueue CRDs when present (schemas and CEL enforced)."""
    docs = _crd_documents()
    if docs is not None:
        return FakeCluster(name, crds=copy.deepcopy(list(docs)))
    return FakeCluster(name, resources=KUEUE_SHORT_FORMS)


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after the deadline."""
    with anyio.fail_after(DEADLINE):
        while True:
            found = await probe()
            if found:
                return found
            await anyio.sleep(0.02)
    raise AssertionError(what)  # pragma: no cover - fail_after raises first


@contextlib.asynccontextmanager
async def running(cluster: FakeCluster, role: str) -> AsyncIterator[JobAdapter]:
    """A JobAdapter on ``cluster``, running until the block ends."""
    conn = ClusterConnection(cluster.name, cluster.kubeconfig, JobAdapter.RESOURCES)
    adapter = JobAdapter(conn, KueueConfig(), SystemClock(), role=role)
    tasks = [asyncio.create_task(conn.run()), asyncio.create_task(adapter.run())]
    try:
        with anyio.fail_after(DEADLINE):
            await conn.wait_synced()
        yield adapter
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        adapter.cancel_timers()
        await conn.close()


@contextlib.asynccontextmanager
async def api_for(cluster: FakeCluster) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio client through the cluster's kubeconfig."""
    api = await config.new_client_from_config_dict(cluster.kubeconfig)
    async with api:
        yield api


@pytest.fixture
async def manager() -> AsyncIterator[FakeCluster]:
    async with new_cluster("manager") as fake:
        yield fake


@pytest.fixture
async def worker() -> AsyncIterator[FakeCluster]:
    async with new_cluster("worker-h100") as fake:
        yield fake


def job_body(
    name: str,
    *,
    parallelism: int = 2,
    completions: int | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    managed_by: str | None = "kueue.x-k8s.io/multikueue",
    suspend: bool = True,
    cpu: str = "1",
) -> Obj:
    """A Job as users submit it to a MultiKueue manager (C87: ``spec.managedBy``)."""
    spec: Obj = {
        "parallelism": parallelism,
        "suspend": suspend,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {GPU_LABEL: H100},
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "nvidia.com/gpu": "1"}},
                    }
                ],
            }
        },
    }
    if completions is not None:
        spec["completions"] = completions
    if managed_by:
        spec["managedBy"] = managed_by
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {QUEUE_NAME_LABEL: "user-queue", **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def prebuilt_workload(name: str, *, count: int = 2, cpu: str = "1") -> Obj:
    """A Workload copy as MultiKueue creates it on a worker (C32: origin label, no owner)."""
    return {
        "apiVersion": f"{KUEUE}/{V1BETA2}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "labels": {ORIGIN_LABEL: "multikueue"}},
        "spec": {
            "queueName": "user-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {GPU_LABEL: H100},
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": cpu, "nvidia.com/gpu": "1"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def condition(kind: str, value: bool = True, reason: str | None = None) -> Obj:
    return {
        "type": kind,
        "status": "True" if value else "False",
        "reason": reason or kind,
        "message": f"{kind} by the test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def admitted_status(flavor: str = "h100", count: int = 2) -> Obj:
    """``QuotaReserved``, ``status.admission`` and ``Admitted`` (upstream SetQuotaReservation)."""
    return {
        "conditions": [condition("QuotaReserved"), condition("Admitted")],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": count,
                    "flavors": {"cpu": flavor, "nvidia.com/gpu": flavor},
                    "resourceUsage": {"cpu": str(count), "nvidia.com/gpu": str(count)},
                }
            ],
        },
    }


def get_cond(obj: Obj | None, kind: str, status: str | None = None) -> Obj | None:
    """The condition ``kind`` (with that ``status``, if given)."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind and (status is None or item.get("status") == status):
            found: Obj = item
            return found
    return None


class Api:
    """Thin helpers over kubernetes_asyncio for Jobs and Workloads (dicts in, dicts out)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)

    async def create_job(self, body: Obj) -> Obj:
        created = await self.batch.create_namespaced_job(NS, body)
        out: Obj = self.api.sanitize_for_serialization(created)
        return out

    async def job(self, name: str) -> Obj | None:
        try:
            response = await self.batch.read_namespaced_job(name, NS, _preload_content=False)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        if response.status == 404:
            return None
        out: Obj = json.loads(await response.read())
        return out

    async def workloads(self) -> list[Obj]:
        listed = await self.custom.list_namespaced_custom_object(KUEUE, V1BETA2, NS, "workloads")
        items: list[Obj] = listed["items"]
        return items

    async def workload(self, name: str) -> Obj | None:
        try:
            found: Obj = await self.custom.get_namespaced_custom_object(
                KUEUE, V1BETA2, NS, "workloads", name
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    async def create_workload(self, body: Obj) -> Obj:
        created: Obj = await self.custom.create_namespaced_custom_object(
            KUEUE, V1BETA2, NS, "workloads", body
        )
        return created

    async def write_workload_status(self, name: str, status: Obj) -> None:
        await self.custom.patch_namespaced_custom_object_status(
            KUEUE, V1BETA2, NS, "workloads", name, {"status": status}, _content_type=MERGE
        )

    async def apply_workload_status(self, name: str, status: Obj) -> None:
        """Write a Workload's admission status as Kueue does: server-side apply as
        ``kueue-admission`` with force (C42), so that Kueue's later applies own these fields."""
        body = {
            "apiVersion": f"{KUEUE}/{V1BETA2}",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": NS},
            "status": status,
        }
        await self.custom.patch_namespaced_custom_object_status(
            KUEUE,
            V1BETA2,
            NS,
            "workloads",
            name,
            body,
            field_manager="kueue-admission",
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    async def flavor(self, name: str, labels: dict[str, str]) -> None:
        await self.custom.create_cluster_custom_object(
            KUEUE,
            V1BETA2,
            "resourceflavors",
            {
                "apiVersion": f"{KUEUE}/{V1BETA2}",
                "kind": "ResourceFlavor",
                "metadata": {"name": name},
                "spec": {"nodeLabels": labels},
            },
        )


# --- naming (pure) ------------------------------------------------------------------------------


def test_c12_workload_name_reproduces_kueue_get_workload_name_for_owner() -> None:
    """Upstream vectors of ``TestGenerateWorkloadName`` (jobframework/workload_names_test.go)."""
    assert workload_name_for_job("name", "uid") == "job-name-ef3a1"
    long_name = (
        "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-"
        "department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-"
        "by-engineering-team-lead-senior-architect-validation-checked-approved-by-legal-and-"
        "ops-dept"
    )
    long_wl = workload_name_for_job(long_name, "uid")
    assert len(long_wl) == 253
    assert long_wl.endswith("-approved-by-l-218b8")
    short = workload_name_for_owner(long_name, "uid", "batch", "Job", max_length=63)
    assert short == "job-marketing-campaign-autumn-2024-region-north-america-d-218b8"


# --- manager: Job → Workload -------------------------------------------------------------------


async def test_c12_manager_job_gets_a_workload_owned_and_named_as_kueue_does(
    manager: FakeCluster,
) -> None:
    async with running(manager, "manager"), api_for(manager) as raw:
        api = Api(raw)
        await api.custom.create_cluster_custom_object(
            KUEUE,
            V1BETA2,
            "workloadpriorityclasses",
            {
                "apiVersion": f"{KUEUE}/{V1BETA2}",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "high"},
                "value": 300,
            },
        )
        job = await api.create_job(
            job_body(
                "train",
                parallelism=3,
                completions=2,
                labels={"kueue.x-k8s.io/priority-class": "high", "team": "a"},
                annotations={
                    RUN_SECONDS_ANNOTATION: "30",
                    "multikueue-dispatcher.io/preferred-gpu-types": H100,
                },
            )
        )
        uid = job["metadata"]["uid"]
        name = workload_name_for_job("train", uid)
        assert name.startswith("job-train-")
        assert len(name) == len("job-train-") + 5
        wl = await eventually(lambda: api.workload(name), "the Job's Workload")
        assert wl["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert wl["metadata"]["labels"] == {JOB_UID_LABEL: uid}
        assert wl["metadata"]["finalizers"] == [RESOURCE_IN_USE_FINALIZER]
        # Only the sandbox's run-seconds annotation is carried over (upstream copies none).
        assert wl["metadata"]["annotations"] == {RUN_SECONDS_ANNOTATION: "30"}
        spec = wl["spec"]
        assert spec["queueName"] == "user-queue"
        assert spec["priority"] == 300
        assert spec["priorityClassRef"] == {
            "group": KUEUE,
            "kind": "WorkloadPriorityClass",
            "name": "high",
        }
        [pod_set] = spec["podSets"]
        assert pod_set["name"] == "main"
        assert pod_set["count"] == 2  # min(parallelism, completions)
        assert pod_set["template"]["spec"]["nodeSelector"] == {GPU_LABEL: H100}
        # The manager's Job stays suspended while its Workload is not admitted (C33).
        assert (await api.job("train") or {})["spec"]["suspend"] is True
        assert len(await api.workloads()) == 1


async def test_c33_unsuspended_queued_job_is_suspended_before_its_workload_exists(
    manager: FakeCluster,
) -> None:
    async with running(manager, "manager"), api_for(manager) as raw:
        api = Api(raw)
        await api.create_job(job_body("eager", suspend=False, parallelism=1))

        async def suspended_with_workload() -> bool:
            job = await api.job("eager")
            return bool(job and job["spec"]["suspend"] and await api.workloads())

        await eventually(suspended_with_workload, "suspended Job and a Workload")
        [wl] = await api.workloads()
        assert wl["spec"]["priority"] == 0
        assert "priorityClassRef" not in wl["spec"]


async def test_s11_deleting_the_manager_job_deletes_its_workload(manager: FakeCluster) -> None:
    """The garbage collector (emulated) and Kueue's finalizer removal."""
    async with running(manager, "manager"), api_for(manager) as raw:
        api = Api(raw)
        await api.create_job(job_body("gone"))
        await eventually(api.workloads, "a Workload")
        await api.batch.delete_namespaced_job("gone", NS)

        async def no_workloads() -> bool:
            return not await api.workloads()

        await eventually(no_workloads, "the Workload to be collected")


# --- worker: prebuilt Workload ----------------------------------------------------------------


async def multikueue_copy(
    api: Api, job: str, workload: str, *, service_account: str | None = None
) -> Obj:
    """A copy as MultiKueue makes it on a worker (with the worker's ``h100`` flavor): the
    prebuilt Workload, then its Job with the origin and prebuilt-Workload labels; the Job."""
    await api.flavor("h100", {GPU_LABEL: H100, "cloud.example.com/pool": "gpu"})
    await api.create_workload(prebuilt_workload(workload))
    remote = job_body(
        job,
        managed_by=None,
        labels={PREBUILT_WORKLOAD_LABEL: workload, ORIGIN_LABEL: "multikueue"},
    )
    if service_account is not None:
        remote["spec"]["template"]["spec"]["serviceAccountName"] = service_account
    return await api.create_job(remote)


async def test_s18_worker_job_uses_prebuilt_workload_runs_on_admission_and_completes(
    worker: FakeCluster,
) -> None:
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        job = await multikueue_copy(api, "train", "job-train-abcde")

        async def owned() -> Obj | None:
            wl = await api.workload("job-train-abcde")
            return wl if wl and wl["metadata"].get("ownerReferences") else None

        wl = await eventually(owned, "the Job to own the prebuilt Workload")
        assert wl["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert len(await api.workloads()) == 1  # no Workload of its own
        assert (await api.job("train") or {})["spec"]["suspend"] is True

        # Admission (written as upstream's integration tests do) starts the Job.
        await api.write_workload_status("job-train-abcde", admitted_status())

        async def running_job() -> Obj | None:
            found = await api.job("train")
            ok = found and not found["spec"]["suspend"] and found.get("status", {}).get("active")
            return found if ok else None

        started = await running_job_or_fail(running_job)
        selector = started["spec"]["template"]["spec"]["nodeSelector"]
        assert selector == {GPU_LABEL: H100, "cloud.example.com/pool": "gpu"}
        assert started["status"]["active"] == 2
        assert started["status"]["startTime"]

        # The core finishes the Workload after its run seconds: the Job completes.
        finished = admitted_status()
        finished["conditions"].append(condition("Finished", reason="Succeeded"))
        await api.write_workload_status("job-train-abcde", finished)

        async def complete() -> Obj | None:
            found = await api.job("train")
            return found if get_cond(found, "Complete") else None

        done = await eventually(complete, "the Job to complete")
        assert get_cond(done, "Complete") == {
            **(get_cond(done, "Complete") or {}),
            "status": "True",
            "reason": "CompletionsReached",
        }
        assert get_cond(done, "SuccessCriteriaMet") is not None
        assert done["status"]["succeeded"] == 2
        assert done["status"]["completionTime"]
        assert done["status"]["active"] == 0


async def test_a_worker_job_whose_pods_are_refused_starts_with_no_active_pods(
    worker: FakeCluster,
) -> None:
    """Its pod template names a ServiceAccount, which the test world never creates, so
    Kubernetes refuses the pods (dispatcher.topology.runs.pods_refused): once admitted, the
    Job controller's stand-in starts it with ``active`` 0, as real Kubernetes would."""
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        await multikueue_copy(
            api, "nopods", "job-nopods-abcde", service_account="sandbox-no-such-account"
        )
        await api.write_workload_status("job-nopods-abcde", admitted_status())

        async def started() -> Obj | None:
            found = await api.job("nopods")
            ok = found and not found["spec"]["suspend"] and found.get("status", {}).get("startTime")
            return found if ok else None

        job = await eventually(started, "the Job to start")
        assert job["status"]["active"] == 0
        assert job["status"]["ready"] == 0


async def running_job_or_fail(probe: Callable[[], Awaitable[Obj | None]]) -> Obj:
    return await eventually(probe, "the Job to run")


async def test_c37_eviction_suspends_the_job_and_restores_its_template(
    worker: FakeCluster,
) -> None:
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        await api.flavor("h100", {GPU_LABEL: H100, "cloud.example.com/pool": "gpu"})
        await api.create_workload(prebuilt_workload("wl-evict"))
        await api.create_job(
            job_body("evict", managed_by=None, labels={PREBUILT_WORKLOAD_LABEL: "wl-evict"})
        )
        await api.write_workload_status("wl-evict", admitted_status())

        async def unsuspended() -> bool:
            job = await api.job("evict")
            return bool(job and not job["spec"]["suspend"])

        await eventually(unsuspended, "the Job to start")
        evicted = {
            "conditions": [
                condition("QuotaReserved", False, "Pending"),
                condition("Admitted", False, "NoReservation"),
                condition("Evicted", True, "Preempted"),
            ],
            "admission": None,
        }
        await api.write_workload_status("wl-evict", evicted)

        async def suspended() -> Obj | None:
            job = await api.job("evict")
            return job if job and job["spec"]["suspend"] and get_cond(job, "Suspended") else None

        job = await eventually(suspended, "the Job to be suspended again")
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {GPU_LABEL: H100}
        assert (get_cond(job, "Suspended") or {})["reason"] == "JobSuspended"
        assert "startTime" not in job["status"]


async def test_c25_prebuilt_workload_out_of_sync_with_its_job_is_finished_out_of_sync(
    worker: FakeCluster,
) -> None:
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        await api.create_workload(prebuilt_workload("wl-drift", count=4))
        await api.create_job(
            job_body("drift", managed_by=None, labels={PREBUILT_WORKLOAD_LABEL: "wl-drift"})
        )

        async def finished() -> Obj | None:
            wl = await api.workload("wl-drift")
            return get_cond(wl, "Finished")

        found = await eventually(finished, "OutOfSync")
        assert found["reason"] == "OutOfSync"
        assert found["message"] == "The prebuilt workload is out of sync with its user job"


async def test_c68_deleting_the_workload_copy_stops_the_worker_job_and_keeps_it(
    worker: FakeCluster,
) -> None:
    """Kueue's ``handleJobWithNoWorkload``: a Job whose prebuilt Workload is gone is stopped
    (suspended) and kept ("prebuilt workload not found"), a MultiKueue Job on a worker too; only
    MultiKueue's removal of a copy's remote objects deletes it (C24, C41). Before, the emulation
    deleted it with the copy, and a leftover Job real Kueue keeps (C68) never showed here."""
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        await multikueue_copy(api, "copy", "wl-copy")

        async def owned() -> bool:
            wl = await api.workload("wl-copy")
            return bool(wl and wl["metadata"].get("ownerReferences"))

        await eventually(owned, "the Job to own the copy")
        await api.write_workload_status("wl-copy", admitted_status())

        async def running_job() -> Obj | None:
            found = await api.job("copy")
            return found if found and not found["spec"]["suspend"] else None

        await eventually(running_job, "the Job to run")
        await api.custom.delete_namespaced_custom_object(KUEUE, V1BETA2, NS, "workloads", "wl-copy")

        async def stopped() -> Obj | None:
            found = await api.job("copy")
            return found if found and found["spec"]["suspend"] else None

        job = await eventually(stopped, "the worker Job stopped")
        assert job["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] == "wl-copy"


# --- MultiKueue hooks: the real Job on the winner only ------------------------------------------


async def test_c28_s55_sync_remote_job_creates_the_worker_job_and_mirrors_its_status(
    manager: FakeCluster, worker: FakeCluster
) -> None:
    async with (
        running(manager, "manager") as adapter,
        api_for(manager) as raw_manager,
        api_for(worker) as raw_worker,
        KubeClient(worker.kubeconfig) as worker_client,
    ):
        mgr, wrk = Api(raw_manager), Api(raw_worker)
        await mgr.create_job(job_body("sim", annotations={RUN_SECONDS_ANNOTATION: "5"}))
        [local] = await eventually(mgr.workloads, "the manager Workload")
        name = local["metadata"]["name"]

        # C28 step 2: create the Job on the winner.
        assert await adapter.sync_remote_job(worker_client, local, "worker-h100") is False
        remote = await wrk.job("sim")
        assert remote is not None
        assert remote["metadata"]["labels"] == {
            QUEUE_NAME_LABEL: "user-queue",
            PREBUILT_WORKLOAD_LABEL: name,
            ORIGIN_LABEL: "multikueue",
        }
        assert remote["metadata"]["annotations"] == {RUN_SECONDS_ANNOTATION: "5"}
        assert "managedBy" not in remote["spec"] or remote["spec"]["managedBy"] is None
        assert remote["spec"]["suspend"] is True  # copied while the manager Job is suspended
        assert workload_key_for(remote) == (NS, name)  # remote Job events map to the Workload

        # While the manager Job is suspended and the worker's runs, status is not mirrored
        # (upstream defers the sync; both suspended would be mirrored, determineStatusUpdate).
        await wrk.batch.patch_namespaced_job("sim", NS, {"spec": {"suspend": False}})
        running_status = {"active": 2, "startTime": "2026-01-01T00:00:00Z"}
        await wrk.batch.patch_namespaced_job_status(
            "sim", NS, {"status": running_status}, _content_type=MERGE
        )
        # Reported as deferred: the reconciler comes back after 2 s (C28 step 4).
        assert await adapter.sync_remote_job(worker_client, local, "worker-h100") is True
        assert not (await mgr.job("sim") or {}).get("status", {}).get("active")

        # Admitted on the manager (check Ready): Kueue unsuspends the manager Job; it does not
        # run there (managedBy), but now the worker's status is mirrored onto it.
        await mgr.write_workload_status(name, admitted_status(flavor="default-flavor"))

        async def unsuspended() -> bool:
            job = await mgr.job("sim")
            return bool(job and not job["spec"]["suspend"])

        await eventually(unsuspended, "the manager Job to be unsuspended")
        assert await adapter.sync_remote_job(worker_client, local, "worker-h100") is False
        mirrored = await mgr.job("sim") or {}
        assert mirrored["status"]["active"] == 2
        assert mirrored["status"]["startTime"] == "2026-01-01T00:00:00Z"

        # C25: the remote Job completes; the final status comes back and the Workload finishes.
        done = {
            "active": None,
            "succeeded": 2,
            "completionTime": "2026-01-01T00:00:05Z",
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"},
            ],
        }
        await wrk.batch.patch_namespaced_job_status(
            "sim", NS, {"status": done}, _content_type=MERGE
        )
        await adapter.sync_remote_job(worker_client, local, "worker-h100")
        final = await mgr.job("sim") or {}
        assert final["status"]["succeeded"] == 2
        assert "active" not in final["status"]
        assert get_cond(final, "Complete") is not None

        async def workload_finished() -> Obj | None:
            return get_cond(await mgr.workload(name), "Finished")

        finished = await eventually(workload_finished, "the manager Workload to finish")
        assert (finished["reason"], finished["message"]) == (
            "Succeeded",
            "Job finished successfully",
        )

        # C24: the remote Job is removed with the copy.
        await adapter.remove_remote_job(worker_client, local, "worker-h100")
        assert await wrk.job("sim") is None


# --- end to end: Kueue core + MultiKueue + the Job adapter on a served topology -----------------


async def test_s18_s55_job_on_the_manager_runs_on_a_worker_end_to_end(tmp_path: Path) -> None:
    """A Job submitted to the manager runs on one worker only (C33), its status and finish come
    back to the manager (C25, C28 step 2), and the worker's objects are removed (S11).

    The clusters come from ``start_topology`` (generic topology, two workers); the manager runs
    the core, the MultiKueue controllers with Kueue's default AllAtOnce dispatcher and the
    adapter's hooks; every worker runs the core and the adapter.
    """
    from dispatcher.topology import generic_topology
    from dispatcher_sandbox.serve import run_topology

    topology = generic_topology(["worker-1", "worker-2"])
    config_ = KueueConfig(worker_lost_timeout_seconds=5.0)
    clock = SystemClock()
    async with (
        run_topology(tmp_path / "kubeconfigs", topology) as sandbox,
        contextlib.AsyncExitStack() as stack,
    ):
        runners: list[Callable[[], Awaitable[None]]] = []
        conns: list[ClusterConnection] = []
        adapters: dict[str, JobAdapter] = {}
        mk: Any = None
        for cluster in sandbox.clusters:
            role = "manager" if cluster is sandbox.manager else "worker"
            conn = ClusterConnection(cluster.name, cluster.kubeconfig, ())
            kueue_core = CoreKueue(conn, config_, clock, role=role)
            adapter = JobAdapter(conn, config_, clock, role=role)
            adapters[cluster.name] = adapter
            runners += [conn.run, kueue_core.run, adapter.run]
            if role == "manager":
                mk = MultiKueueManager(
                    conn,
                    config_,
                    clock,
                    sync_remote_job=adapter.sync_remote_job,
                    remove_remote_job=adapter.remove_remote_job,
                )
                runners.append(mk.run)
            conns.append(conn)
        tasks = [asyncio.create_task(runner()) for runner in runners]  # type: ignore[arg-type]
        try:
            mgr = Api(await stack.enter_async_context(api_for(sandbox.manager)))
            workers = {
                w.name: Api(await stack.enter_async_context(api_for(w))) for w in sandbox.workers
            }
            body = job_body("e2e", parallelism=1, annotations={RUN_SECONDS_ANNOTATION: "0.5"})
            body["spec"]["template"]["spec"].pop("nodeSelector")
            body["spec"]["template"]["spec"]["containers"][0]["resources"] = {
                "requests": {"cpu": "1"}
            }
            job = await mgr.create_job(body)
            name = workload_name_for_job("e2e", job["metadata"]["uid"])

            async def finished() -> Obj | None:
                return get_cond(await mgr.workload(name), "Finished")

            done = await eventually(finished, "the manager Workload to finish")
            assert done["reason"] == "Succeeded"
            local = await mgr.workload(name) or {}
            winner = local["status"]["clusterName"]
            assert winner in workers

            async def manager_job_complete() -> Obj | None:
                found = await mgr.job("e2e")
                return found if get_cond(found, "Complete") else None

            final = await eventually(manager_job_complete, "the final status on the manager")
            assert final["status"]["succeeded"] == 1
            assert final["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"

            async def worker_objects_gone() -> bool:
                for api in workers.values():
                    if await api.workloads() or await api.job("e2e") is not None:
                        return False
                return True

            await eventually(worker_objects_gone, "the worker copies and Jobs to go (S11)")
            # C33: the real Job was only ever created on the winner (copies went everywhere).
            created_jobs = {
                w.name: [
                    e
                    for e in w.journal.entries()
                    if e.method == "POST" and e.path.endswith("/jobs") and e.status == 201
                ]
                for w in sandbox.workers
            }
            assert {n: len(e) for n, e in created_jobs.items()} == {
                n: int(n == winner) for n in workers
            }
            for w in sandbox.workers:  # AllAtOnce: a Workload copy on every worker
                assert any(
                    e.method == "POST" and e.path.endswith("/workloads") and e.status == 201
                    for e in w.journal.entries()
                ), w.name
            assert all(a.errors == 0 for a in adapters.values())
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for adapter in adapters.values():
                adapter.cancel_timers()
            for conn in conns:
                await conn.close()


# --- issue 14 item 6: quota comes back only when the Job has no active pods ---------------------


def evicted_status(reason: str = "Preempted", flavor: str = "h100") -> Obj:
    """An evicted Workload that still holds its quota, as the core leaves it (C13, C37)."""
    status = admitted_status(flavor=flavor)
    evicted = condition("Evicted", reason=reason)
    evicted["message"] = "Preempted to accommodate a workload"
    status["conditions"].append(evicted)
    return status


async def test_item6_worker_releases_quota_after_the_job_controller_zeroes_active(
    worker: FakeCluster,
) -> None:
    """issue14-6, C13, C37: on eviction the Job reconciler suspends the Job; the Job
    controller (stand-in) removes its pods (``active: 0``); only then is ``QuotaReserved``
    cleared (``pkg/controller/jobframework/reconciler.go``: ``stopJob``, then
    ``UnsetQuotaReservationWithCondition`` once ``!job.IsActive()``)."""
    async with running(worker, "worker"), api_for(worker) as raw:
        api = Api(raw)
        await api.flavor("h100", {GPU_LABEL: H100})
        await api.create_workload(prebuilt_workload("wl-run"))
        await api.create_job(
            job_body("run", managed_by=None, labels={PREBUILT_WORKLOAD_LABEL: "wl-run"})
        )
        await api.apply_workload_status("wl-run", admitted_status())

        async def active() -> Obj | None:
            job = await api.job("run")
            return job if job and (job.get("status") or {}).get("active") else None

        await eventually(active, "the Job to run")
        await api.apply_workload_status("wl-run", evicted_status())

        async def released() -> Obj | None:
            wl = await api.workload("wl-run")
            return wl if get_cond(wl, "QuotaReserved", "False") else None

        wl = await eventually(released, "the quota to be released")
        job = await api.job("run") or {}
        assert job["spec"]["suspend"] is True
        assert not job["status"].get("active")
        # Writes in the order of the single resourceVersion counter of the cluster.
        assert int(job["metadata"]["resourceVersion"]) < int(wl["metadata"]["resourceVersion"])
        status = wl["status"]
        assert "admission" not in status
        assert (get_cond(wl, "QuotaReserved") or {})["reason"] == "Pending"
        assert (get_cond(wl, "QuotaReserved") or {})["message"] == (
            "Preempted to accommodate a workload"
        )
        assert (get_cond(wl, "Requeued") or {})["status"] == "True"
        assert (get_cond(wl, "Admitted") or {})["reason"] == "NoReservation"
        assert (get_cond(wl, "Evicted") or {})["status"] == "True"  # reset on re-reservation


async def test_item6_manager_keeps_quota_while_the_mirrored_job_is_active(
    manager: FakeCluster,
) -> None:
    """issue14-6: on the manager the Job never runs (``managedBy: kueue.x-k8s.io/multikueue``);
    its ``status.active`` is MultiKueue's copy of the worker's. The evicted Workload keeps its
    quota until that copy says no pod is active."""
    async with running(manager, "manager"), api_for(manager) as raw:
        api = Api(raw)
        created = await api.create_job(job_body("mk", parallelism=1))
        name = workload_name_for_job("mk", created["metadata"]["uid"])
        await eventually(lambda: api.workload(name), "the manager Workload")
        await api.apply_workload_status(name, admitted_status(flavor="default", count=1))

        async def unsuspended() -> Obj | None:
            job = await api.job("mk")
            return job if job and not job["spec"]["suspend"] else None

        await eventually(unsuspended, "the manager Job to be unsuspended")
        mirrored = {"active": 1, "ready": 1, "startTime": "2026-01-01T00:00:00Z"}
        await api.batch.patch_namespaced_job_status(
            "mk", NS, {"status": mirrored}, _content_type=MERGE
        )
        await api.apply_workload_status(
            name, evicted_status(reason="AdmissionCheck", flavor="default")
        )

        async def suspended() -> Obj | None:
            # Job.Stop suspends the spec, then resets startTime in a second (status) write; a
            # read between the two saw the old startTime (CI at 0798f4f, under load).
            job = await api.job("mk")
            stopped = job and job["spec"]["suspend"] and "startTime" not in job["status"]
            return job if stopped else None

        stopped = await eventually(suspended, "the manager Job suspended, startTime reset")
        assert stopped["status"]["active"] == 1  # nobody runs pods here: still the copy
        # A pass that sees the next Job also saw the suspended one (one Job informer, in
        # order); a release would have been written before the next Job's Workload.
        probe = await api.create_job(job_body("probe", parallelism=1))
        probe_name = workload_name_for_job("probe", probe["metadata"]["uid"])
        await eventually(lambda: api.workload(probe_name), "the probe's Workload")
        held = await api.workload(name) or {}
        assert (get_cond(held, "QuotaReserved") or {})["status"] == "True"
        assert held["status"]["admission"]["clusterQueue"] == "cq"

        # MultiKueue copies the worker's status once both Jobs are suspended: no pod left.
        await api.batch.patch_namespaced_job_status(
            "mk", NS, {"status": {"active": 0, "ready": 0}}, _content_type=MERGE
        )

        async def released() -> Obj | None:
            wl = await api.workload(name)
            return wl if get_cond(wl, "QuotaReserved", "False") else None

        wl = await eventually(released, "the manager quota to be released")
        requeued = get_cond(wl, "Requeued") or {}
        assert (requeued["status"], requeued["reason"]) == ("False", "AdmissionCheck")


# --- work per event -----------------------------------------------------------------------------


async def settled(adapter: JobAdapter, workloads: int) -> None:
    """Until the adapter's cache holds ``workloads`` Workloads and it has nothing left to do
    (an event it has seen clears ``idle`` at once, so waiting for the count first is enough)."""

    async def counted() -> bool:
        return len(adapter.conn.cache(WORKLOADS).objects) == workloads

    await eventually(counted, f"{workloads} Workloads in the adapter's cache")
    with anyio.fail_after(DEADLINE):
        await adapter.idle.wait()


async def test_an_event_reconciles_the_one_job_it_names(manager: FakeCluster) -> None:
    """Kueue's Job reconciler is keyed by Job (its Workload watch maps each Workload to its
    owner): a new Job, its Workload's creation and a Job's deletion cost work for that Job
    alone, not a pass over the 20 others; a ResourceFlavor change (read when a Job starts)
    looks at every Job once."""
    async with running(manager, "manager") as adapter, api_for(manager) as raw:
        api = Api(raw)
        for i in range(20):
            await api.create_job(job_body(f"bystander-{i}"))
        await settled(adapter, 20)

        seen_jobs: list[str] = []
        seen_workloads: list[str] = []
        reconcile_job = adapter._reconcile_job
        collect = adapter._collect_garbage

        async def counting_job(job: Obj, *args: Any) -> float | None:
            seen_jobs.append(job["metadata"]["name"])
            return await reconcile_job(job, *args)

        async def counting_gc(wl: Obj, *args: Any) -> None:
            seen_workloads.append(wl["metadata"]["name"])
            await collect(wl, *args)

        adapter._reconcile_job = counting_job  # type: ignore[method-assign]
        adapter._collect_garbage = counting_gc  # type: ignore[method-assign]

        created = await api.create_job(job_body("newcomer"))
        await settled(adapter, 21)
        assert set(seen_jobs) == {"newcomer"}, seen_jobs
        assert 1 <= len(seen_jobs) <= 3, seen_jobs  # the Job's event, its Workload's
        newcomer_wl = workload_name_for_job("newcomer", created["metadata"]["uid"])
        assert set(seen_workloads) == {newcomer_wl}, seen_workloads

        seen_jobs.clear()
        seen_workloads.clear()
        await api.batch.delete_namespaced_job("newcomer", NS)
        await settled(adapter, 20)
        assert set(seen_jobs) <= {"newcomer"}, seen_jobs  # deleted: nothing to reconcile
        assert set(seen_workloads) == {newcomer_wl}, seen_workloads

        seen_jobs.clear()
        await api.custom.create_cluster_custom_object(
            KUEUE,
            V1BETA2,
            "resourceflavors",
            {
                "apiVersion": f"{KUEUE}/{V1BETA2}",
                "kind": "ResourceFlavor",
                "metadata": {"name": "any-flavor"},
                "spec": {},
            },
        )

        async def all_seen() -> bool:
            return len(seen_jobs) >= 20

        await eventually(all_seen, "every Job reconciled after the flavor's creation")
        with anyio.fail_after(DEADLINE):
            await adapter.idle.wait()
        assert sorted(seen_jobs) == sorted(f"bystander-{i}" for i in range(20))
