"""Kueue's Job defaulting webhook as the sandbox emulates it (issue 14 item 2, contract C22).

Upstream: ``pkg/controller/jobs/job/job_webhook.go`` ``Default`` calls
``jobframework.ApplyDefaultForSuspend`` and ``ApplyDefaultForManagedBy``: a queued Job is
suspended, and it is given ``spec.managedBy: kueue.x-k8s.io/multikueue`` when ``managedBy`` is
unset or the built-in Job controller and its LocalQueue's ClusterQueue has an AdmissionCheck of
the MultiKueue controller. The table below covers each branch; one test runs the hook in a fake
API server (CREATE only). The end-to-end check, with kubectl on ``sandbox serve`` and on real
Kueue, is ``test_serve_plain_job.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    KubeClient,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.jobs.job_webhook import (
    JOB_WEBHOOK_NAME,
    default_job,
    kueue_job_webhook,
    store_lookup,
)

Obj = dict[str, Any]
MK = "kueue.x-k8s.io/multikueue"
QUEUE = "kueue.x-k8s.io/queue-name"


def _cq(name: str, checks: list[str]) -> Obj:
    spec: Obj = {"resourceGroups": []}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"metadata": {"name": name}, "spec": spec}


def _ac(name: str, controller: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


# The cluster: team-a/user-queue -> cq (MultiKueue check), team-a/plain-queue -> plain-cq (no
# checks), team-a/prov-queue -> prov-cq (a check of another controller), team-a/ghost-queue ->
# ghost-cq (names a check that does not exist), team-a/lost-queue -> a ClusterQueue that does not
# exist.
OBJECTS: dict[tuple[str, str, str], Obj] = {
    ("localqueues", "team-a", "user-queue"): {"spec": {"clusterQueue": "cq"}},
    ("localqueues", "team-a", "plain-queue"): {"spec": {"clusterQueue": "plain-cq"}},
    ("localqueues", "team-a", "prov-queue"): {"spec": {"clusterQueue": "prov-cq"}},
    ("localqueues", "team-a", "ghost-queue"): {"spec": {"clusterQueue": "ghost-cq"}},
    ("localqueues", "team-a", "lost-queue"): {"spec": {"clusterQueue": "nowhere"}},
    ("clusterqueues", "", "cq"): _cq("cq", ["prov", "multikueue"]),
    ("clusterqueues", "", "plain-cq"): _cq("plain-cq", []),
    ("clusterqueues", "", "prov-cq"): _cq("prov-cq", ["prov"]),
    ("clusterqueues", "", "ghost-cq"): _cq("ghost-cq", ["missing"]),
    ("admissionchecks", "", "multikueue"): _ac("multikueue", MK),
    ("admissionchecks", "", "prov"): _ac("prov", "kueue.x-k8s.io/provisioning-request"),
}


def lookup(resource: Resource, name: str, namespace: str | None) -> Obj | None:
    return OBJECTS.get((resource.plural, namespace or "", name))


def job(
    queue: str | None = "user-queue",
    *,
    managed_by: str | None = None,
    suspend: bool | None = True,
    namespace: str = "team-a",
) -> Obj:
    meta: Obj = {"name": "j", "namespace": namespace}
    if queue is not None:
        meta["labels"] = {QUEUE: queue}
    spec: Obj = {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    if managed_by is not None:
        spec["managedBy"] = managed_by
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


# (job, expected (suspend, managedBy) after the hook; None: the hook changes nothing)
CASES = {
    "plain-queued-job-gets-managed-by": (job(), (True, MK)),
    "unsuspended-queued-job-is-suspended-too": (job(suspend=None), (True, MK)),
    "built-in-controller-is-replaced": (
        job(managed_by="kubernetes.io/job-controller"),
        (True, MK),
    ),
    "already-multikueue-unchanged": (job(managed_by=MK), None),
    "another-controller-kept": (job(managed_by="example.com/other"), None),
    "no-queue-label-untouched": (job(None, suspend=False), None),
    "queue-in-another-namespace-not-found": (job(namespace="team-b", suspend=False), (True, None)),
    "cluster-queue-without-checks": (job("plain-queue"), None),
    "only-a-check-of-another-controller": (job("prov-queue"), None),
    "check-that-does-not-exist": (job("ghost-queue"), None),
    "cluster-queue-that-does-not-exist": (job("lost-queue", suspend=False), (True, None)),
}


@pytest.mark.parametrize(("body", "expected"), CASES.values(), ids=CASES.keys())
def test_c22_job_webhook_defaults(body: Obj, expected: tuple[bool, str | None] | None) -> None:
    before = copy.deepcopy(body)
    changed = default_job(body, lookup)
    assert body == before  # the request's object is not modified in place
    if expected is None:
        assert changed is None
        return
    assert changed is not None
    assert (changed["spec"].get("suspend"), changed["spec"].get("managedBy")) == expected


async def test_c22_job_webhook_on_a_fake_server_mutates_job_creates_only(crds_dir: Path) -> None:
    async with (
        FakeCluster("manager", crd_paths=[crds_dir]) as cluster,
        KubeClient(cluster.kubeconfig) as kube,
    ):
        cluster.admission.add_mutating(kueue_job_webhook(store_lookup(cluster.store)))
        assert [h.name for h in cluster.admission.mutating] == [JOB_WEBHOOK_NAME]
        await kube.create(NAMESPACES, {"metadata": {"name": "team-a"}})
        await kube.create(ADMISSION_CHECKS, _ac("multikueue", MK))
        await kube.create(CLUSTER_QUEUES, _cq("cq", ["multikueue"]))
        await kube.create(
            LOCAL_QUEUES,
            {
                "metadata": {"name": "user-queue", "namespace": "team-a"},
                "spec": {"clusterQueue": "cq"},
            },
        )
        created = await kube.create(JOBS, job(suspend=False))
        assert (created["spec"]["suspend"], created["spec"]["managedBy"]) == (True, MK)

        # UPDATE is not matched (the webhook is registered for CREATE): a later write that
        # unsuspends the Job keeps its value.
        updated = await kube.merge_patch(
            JOBS, "j", {"spec": {"suspend": False}}, namespace="team-a", field_manager="test"
        )
        assert (updated["spec"]["suspend"], updated["spec"]["managedBy"]) == (False, MK)
