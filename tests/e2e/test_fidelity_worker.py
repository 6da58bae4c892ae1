"""Fidelity of the worker side of the emulated Kueue (issue 14 items 6 to 9), on both backends.

Each scenario shows one divergence the emulation had from Kueue v0.19.2 and passes on
``--backend sandbox`` and on ``--backend real`` (real kube-apiserver, etcd and Kueue). They act
on ``worker1`` directly, as a user of that cluster would, with Jobs (``batch/v1``, suspended,
with the ``kueue.x-k8s.io/queue-name`` label) and, where a scenario needs its own quotas, with
ClusterQueues and a LocalQueue it creates for itself and deletes afterwards (``fidelity-*``;
the topology's queues are left alone):

- item 6 (C13, C37): after an eviction the quota comes back only once the Job has no active
  pods. The victim's Job is managed by a third-party controller (``spec.managedBy``), played by
  the test through the Job's status: neither the real backend's Job-controller stand-in nor the
  emulation's runs it, so its ``status.active`` is what the test writes.
- item 7 (C72): a worker's ClusterQueue has no admission checks: ``QuotaReserved`` and
  ``Admitted`` come in one write; on the manager (MultiKueue check) they stay two.
- item 8 (C69): a ClusterQueue covering ``pods`` charges each pod.
- item 9 (C72): no preemption for a request above nominal quota (that needs borrowing) unless
  ``borrowWithinCohort`` is set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from dispatcher.topology import WorkloadLine
from dispatcher_sandbox.harness.e2e.backend import (
    NAMESPACE,
    KubeBackend,
    cluster_of,
    condition,
    is_false,
    is_true,
)

pytestmark = [pytest.mark.slow, pytest.mark.crds]

Obj = dict[str, Any]
WORKER = "worker1"
FLAVOR = "a100"  # worker1's ResourceFlavor (tests/e2e/topology.yaml)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
THIRD_PARTY_CONTROLLER = "example.com/fidelity-job-controller"
QUIET = 3.0
"""How long a scenario watches for something that must not happen (kept short for real runs)."""


@pytest.fixture(autouse=True)
async def clean(backend: KubeBackend) -> AsyncIterator[None]:
    """Every scenario starts with no Jobs and no Workloads on any cluster."""
    await backend.reset()
    return


def local_job(
    backend: KubeBackend,
    name: str,
    queue: str,
    *,
    cpu: str = "1",
    count: int = 1,
    priority: str | None = None,
    managed_by: str | None = None,
) -> Obj:
    """A Job for a worker's own Kueue (no MultiKueue): ``count`` pods of ``cpu`` each."""
    data: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "queue": queue,
        "count": count,
        "requests": {"cpu": cpu, "memory": "100Mi"},
    }
    if priority:
        data["priorityClass"] = priority
    body = backend.job_body(WorkloadLine.model_validate(data))
    del body["spec"]["managedBy"]
    if managed_by:
        body["spec"]["managedBy"] = managed_by
    assert body["metadata"]["labels"][QUEUE_LABEL] == queue
    return body


def cluster_queue(
    name: str,
    quotas: dict[str, str],
    *,
    cohort: str | None = None,
    preemption: Obj | None = None,
) -> Obj:
    """A ClusterQueue with one resource group of worker1's flavor, for every namespace."""
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quotas),
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, cq: str) -> Obj:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterQueue": cq},
    }


@pytest.fixture
async def queues(backend: KubeBackend) -> AsyncIterator[Callable[..., Any]]:
    """Create ClusterQueues and one LocalQueue on worker1 for a scenario; all are deleted after
    the scenario's Jobs and Workloads are gone."""
    made: list[tuple[str, str, str | None]] = []

    async def create(lq: str, *cqs: Obj) -> None:
        for cq in cqs:
            await backend.create_kueue_object(WORKER, "clusterqueues", cq)
            made.append(("clusterqueues", cq["metadata"]["name"], None))
        first = cqs[0]["metadata"]["name"]
        await backend.create_kueue_object(WORKER, "localqueues", local_queue(lq, first))
        made.append(("localqueues", lq, NAMESPACE))
        for cq in cqs:
            await wait_active(backend, "clusterqueues", cq["metadata"]["name"])
        await wait_active(backend, "localqueues", lq, NAMESPACE)

    yield create
    await backend.reset()
    for plural, name, namespace in reversed(made):
        await backend.delete_kueue_object(WORKER, plural, name, namespace)


async def wait_until(backend: KubeBackend, probe: Callable[[], Any], what: str) -> None:
    """Poll an API read until it holds (for objects the backend does not mirror)."""
    with anyio.fail_after(backend.timeouts.short):
        while True:
            if await probe():
                return
            await anyio.sleep(0.2)  # an unmirrored object: re-read, bounded by the deadline


async def wait_active(
    backend: KubeBackend, plural: str, name: str, namespace: str | None = None
) -> None:
    """Wait until Kueue reports the queue ``Active`` (it then counts it, cohort included)."""

    async def active() -> bool:
        return is_true(await backend.read_kueue_object(WORKER, plural, name, namespace), "Active")

    await wait_until(backend, active, f"{plural}/{name} Active")


def workload(backend: KubeBackend, job: str) -> Obj | None:
    return backend.workload_of_job_on(WORKER, job)


def reserved(obj: Obj | None) -> bool:
    return is_true(obj, "QuotaReserved")


async def wait_workload(
    backend: KubeBackend, job: str, predicate: Callable[[Obj], bool], what: str
) -> Obj:
    def check() -> Obj | None:
        found = workload(backend, job)
        return found if found is not None and predicate(found) else None

    return await backend.wait_for(check, f"{WORKER} {job}: {what}", backend.timeouts.short)


# --- item 6 -------------------------------------------------------------------------------------


async def test_item6_quota_is_released_only_once_the_job_has_no_active_pods(
    backend: KubeBackend, queues: Callable[..., Any]
) -> None:
    """issue14-6: Kueue's Job reconciler stops an evicted Job and clears the reservation only
    when ``status.active`` is 0 (``reconciler.go``, eviction step): until then the victim keeps
    its quota and the preemptor waits."""
    await queues(
        "fidelity-6",
        cluster_queue(
            "fidelity-6",
            {"cpu": "2", "memory": "1Gi"},
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
    )
    victim = local_job(
        backend,
        "f6-victim",
        "fidelity-6",
        cpu="2",
        priority="low",
        managed_by=THIRD_PARTY_CONTROLLER,
    )
    await backend.create_job_on(WORKER, victim)
    await wait_workload(backend, "f6-victim", lambda w: is_true(w, "Admitted"), "admitted")
    await backend.wait_for(
        lambda: (backend.job_on(WORKER, "f6-victim") or {}).get("spec", {}).get("suspend") is False,
        "the victim's Job started",
        backend.timeouts.short,
    )
    # Its controller runs one pod.
    await backend.patch_job_status_on(WORKER, "f6-victim", {"active": 1})
    await backend.create_job_on(
        WORKER, local_job(backend, "f6-preemptor", "fidelity-6", cpu="2", priority="high")
    )
    await wait_workload(
        backend, "f6-victim", lambda w: is_true(w, "Evicted"), "evicted by the preemptor"
    )
    await backend.wait_for(
        lambda: (backend.job_on(WORKER, "f6-victim") or {}).get("spec", {}).get("suspend") is True,
        "the victim's Job suspended",
        backend.timeouts.short,
    )
    await backend.stays(
        lambda: (
            reserved(workload(backend, "f6-victim"))
            and is_true(workload(backend, "f6-victim"), "Evicted")
            and not reserved(workload(backend, "f6-preemptor"))
        ),
        "the victim keeps its quota while its Job has an active pod; the preemptor waits",
        QUIET,
    )
    # Its controller reports the pod gone.
    await backend.patch_job_status_on(WORKER, "f6-victim", {"active": 0})
    released = await wait_workload(
        backend, "f6-victim", lambda w: not reserved(w), "quota released"
    )
    assert "admission" not in released.get("status", {})
    requeued = condition(released, "Requeued") or {}
    assert (requeued.get("status"), requeued.get("reason")) == ("True", "Preempted")
    await wait_workload(backend, "f6-preemptor", lambda w: is_true(w, "Admitted"), "admitted")


# --- item 7 -------------------------------------------------------------------------------------


def reserved_not_admitted(obj: Obj) -> bool:
    return is_true(obj, "QuotaReserved") and not is_true(obj, "Admitted")


async def test_item7_a_worker_admits_in_the_reservation_write_the_manager_in_two(
    backend: KubeBackend,
) -> None:
    """issue14-7: without admission checks Kueue's scheduler sets ``QuotaReserved`` and
    ``Admitted`` in one status write (``prepareWorkload``); with the manager's MultiKueue check
    the reservation comes first and ``Admitted`` once the check is ``Ready``."""
    worker_since = await backend.workloads_version(WORKER)
    await backend.create_job_on(WORKER, local_job(backend, "f7-local", "user-queue"))
    local = await wait_workload(backend, "f7-local", lambda w: is_true(w, "Admitted"), "admitted")
    name = local["metadata"]["name"]
    versions = await backend.replay_workloads(
        WORKER,
        worker_since,
        lambda w: w["metadata"]["name"] == name and is_true(w, "Admitted"),
        backend.timeouts.short,
    )
    mine = [v for v in versions if v["metadata"]["name"] == name]
    assert mine
    assert is_true(mine[-1], "Admitted")
    assert not [v for v in mine if reserved_not_admitted(v)], "reserved before admitted"
    quota = condition(mine[-1], "QuotaReserved") or {}
    admitted = condition(mine[-1], "Admitted") or {}
    assert quota.get("lastTransitionTime") == admitted.get("lastTransitionTime")

    manager_since = await backend.workloads_version("manager")
    await backend.submit(
        WorkloadLine.model_validate(
            {"name": "f7-dispatched", "namespace": NAMESPACE, "requests": {"cpu": "1"}}
        )
    )
    done = await backend.wait_workload(
        "f7-dispatched",
        lambda w: cluster_of(w) is not None and is_true(w, "Admitted"),
        "admitted through MultiKueue",
    )
    on_manager = [
        v
        for v in await backend.replay_workloads(
            "manager",
            manager_since,
            lambda w: w["metadata"]["name"] == done["metadata"]["name"] and is_true(w, "Admitted"),
            backend.timeouts.short,
        )
        if v["metadata"]["name"] == done["metadata"]["name"]
    ]
    assert [v for v in on_manager if reserved_not_admitted(v)], (
        "the manager reserves before its MultiKueue check is Ready"
    )


# --- item 8 -------------------------------------------------------------------------------------


async def test_item8_a_pods_quota_counts_every_pod(
    backend: KubeBackend, queues: Callable[..., Any]
) -> None:
    """issue14-8: with ``pods`` covered (quota 3), Kueue adds ``pods = count`` to each pod set:
    a 2-pod Job is charged 2 pods, the next 2-pod Job waits although cpu is free, a 1-pod Job
    behind it is admitted (BestEffortFIFO)."""
    await queues(
        "fidelity-8", cluster_queue("fidelity-8", {"cpu": "8", "memory": "4Gi", "pods": "3"})
    )
    await backend.create_job_on(
        WORKER, local_job(backend, "f8-two", "fidelity-8", cpu="500m", count=2)
    )
    two = await wait_workload(backend, "f8-two", lambda w: is_true(w, "Admitted"), "admitted")
    [assignment] = two["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"].get("pods") == FLAVOR
    assert assignment["resourceUsage"].get("pods") == "2"
    await backend.create_job_on(
        WORKER, local_job(backend, "f8-two-more", "fidelity-8", cpu="500m", count=2)
    )
    await wait_workload(
        backend,
        "f8-two-more",
        lambda w: is_false(w, "QuotaReserved"),
        "pending for pods",
    )
    await backend.create_job_on(
        WORKER, local_job(backend, "f8-one", "fidelity-8", cpu="500m", count=1)
    )
    await wait_workload(backend, "f8-one", lambda w: is_true(w, "Admitted"), "admitted")
    assert not reserved(workload(backend, "f8-two-more"))

    async def pods_reserved() -> bool:
        cq = await backend.read_kueue_object(WORKER, "clusterqueues", "fidelity-8")
        totals = {
            r["name"]: r["total"]
            for f in cq.get("status", {}).get("flavorsReservation") or []
            for r in f["resources"]
        }
        return totals.get("pods") == "3"

    await wait_until(backend, pods_reserved, "fidelity-8 reserves 3 pods")


# --- item 9 -------------------------------------------------------------------------------------


async def test_item9_no_preemption_to_make_room_for_borrowing(
    backend: KubeBackend, queues: Callable[..., Any]
) -> None:
    """issue14-9: ``fidelity-9`` (4 cpu) shares a cohort with an idle 4-cpu lender. A 6-cpu
    high-priority Job could only be admitted by preempting the 4-cpu low one and borrowing, so
    Kueue does not preempt (``fitsResourceQuota``: above nominal, no ``borrowWithinCohort``: NoFit);
    once ``borrowWithinCohort`` is set it does."""
    await queues(
        "fidelity-9",
        cluster_queue(
            "fidelity-9",
            {"cpu": "4", "memory": "4Gi"},
            cohort="fidelity-9",
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
        cluster_queue("fidelity-9-lender", {"cpu": "4", "memory": "4Gi"}, cohort="fidelity-9"),
    )
    await backend.create_job_on(
        WORKER, local_job(backend, "f9-low", "fidelity-9", cpu="4", priority="low")
    )
    await wait_workload(backend, "f9-low", lambda w: is_true(w, "Admitted"), "admitted")
    await backend.create_job_on(
        WORKER, local_job(backend, "f9-high", "fidelity-9", cpu="6", priority="high")
    )
    await wait_workload(
        backend,
        "f9-high",
        lambda w: is_false(w, "QuotaReserved"),
        "pending",
    )
    await backend.stays(
        lambda: (
            is_true(workload(backend, "f9-low"), "Admitted")
            and not is_true(workload(backend, "f9-low"), "Evicted")
            and not reserved(workload(backend, "f9-high"))
        ),
        "no preemption for a request above nominal quota",
        QUIET,
    )
    await backend.patch_cluster_kueue_object(
        WORKER,
        "clusterqueues",
        "fidelity-9",
        {
            "spec": {
                "preemption": {
                    "reclaimWithinCohort": "LowerPriority",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                }
            }
        },
    )
    evicted = await wait_workload(
        backend, "f9-low", lambda w: is_true(w, "Evicted"), "preempted with borrowWithinCohort"
    )
    assert (condition(evicted, "Evicted") or {}).get("reason") == "Preempted"
    high = await wait_workload(backend, "f9-high", lambda w: is_true(w, "Admitted"), "admitted")
    assert high["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] == "6"
