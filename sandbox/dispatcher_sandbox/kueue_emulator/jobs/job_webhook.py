"""Kueue's batch/Job defaulting webhook (``mjob.kb.io``), emulated as a fake API server hook.

Kueue v0.19 registers a mutating webhook on ``CREATE`` of ``batch/v1`` Jobs
(``pkg/controller/jobs/job/job_webhook.go``, ``JobWebhook.Default``). Of what it defaults, the
emulation does the two steps a MultiKueue user depends on (contract C22: the owner Job must be
managed by MultiKueue, or its Workload is rejected):

* **suspend** (``jobframework.ApplyDefaultForSuspend``): a Job with the
  ``kueue.x-k8s.io/queue-name`` label is created suspended, so that nothing runs before Kueue
  admits it;
* **managedBy** (``jobframework.ApplyDefaultForManagedBy``): when ``spec.managedBy`` is unset or
  the built-in ``kubernetes.io/job-controller`` (``Job.CanDefaultManagedBy``, with the
  ``MultiKueue`` feature gate, beta and on by default since v0.9), the Job has a queue-name
  label, that LocalQueue exists in the Job's namespace, and one of the AdmissionChecks of the
  LocalQueue's ClusterQueue has ``controllerName: kueue.x-k8s.io/multikueue``, the webhook sets
  ``spec.managedBy: kueue.x-k8s.io/multikueue``. The Kubernetes Job controller then leaves the
  manager's Job alone and MultiKueue mirrors the worker's status onto it. (Older Kueue versions
  had a ``MultiKueueBatchJobWithManagedBy`` gate for this; v0.19 no longer has it.)

The ClusterQueue's checks are read as Kueue's cache builds them
(``admissioncheck.NewAdmissionChecks``): the names listed under
``spec.admissionChecksStrategy.admissionChecks``, whatever their ``onFlavors``, and only those
AdmissionChecks that exist. A ClusterQueue that is not active still counts.

Differences from Kueue, on purpose:

* The hook reads LocalQueues, ClusterQueues and AdmissionChecks from the fake API server's store
  at the moment of the write, not from Kueue's informer caches: there is no window after a
  LocalQueue is created in which a Job is not yet defaulted.
* Not emulated: the default LocalQueue (``ApplyDefaultLocalQueue``), default
  WorkloadPriorityClass, ``manageJobsWithoutQueueName``, Jobs owned by another Kueue-managed
  object (``FindAncestorJobManagedByKueue``: no such owner kinds are emulated) and the
  workload-slice scheduling gate (elastic Jobs, off by default).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from dispatcher_sandbox.fake_apiserver.admission import AdmissionRequest, Match, MutatingHook
from dispatcher_sandbox.fake_apiserver.store import Store
from dispatcher_sandbox.kube_client import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.runtime import MULTIKUEUE_CONTROLLER, QUEUE_NAME_LABEL

__all__ = [
    "JOB_WEBHOOK_NAME",
    "Lookup",
    "default_job",
    "kueue_job_webhook",
    "multikueue_cluster_queue",
    "store_lookup",
]

Obj = dict[str, Any]

JOB_WEBHOOK_NAME = "mjob.kb.io"
"""Kueue's name for its Job defaulting webhook (the hook's name on the fake server)."""
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"  # kueue.MultiKueueControllerName
BUILTIN_JOB_CONTROLLER = "kubernetes.io/job-controller"  # batchv1.JobControllerName

Lookup = Callable[[Resource, str, str | None], Obj | None]
"""``lookup(resource, name, namespace)``: the stored object, or None (namespace None for
cluster-scoped kinds)."""


def store_lookup(store: Store) -> Lookup:
    """A :data:`Lookup` on a fake API server's store (what the server holds right now)."""

    def lookup(resource: Resource, name: str, namespace: str | None) -> Obj | None:
        return store.get((resource.group, resource.plural), (namespace or "", name))

    return lookup


def _check_names(cluster_queue: Obj) -> list[str]:
    strategy = (cluster_queue.get("spec") or {}).get("admissionChecksStrategy") or {}
    return [str(item["name"]) for item in strategy.get("admissionChecks") or [] if "name" in item]


def multikueue_cluster_queue(job: Obj, lookup: Lookup) -> str | None:
    """The ClusterQueue behind the Job's LocalQueue when it has a MultiKueue AdmissionCheck
    (Kueue's ``ClusterQueueFromLocalQueue`` then ``AdmissionChecksForClusterQueue``), else None."""
    meta = job.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE_NAME_LABEL)
    namespace = meta.get("namespace")
    if not queue or not namespace:
        return None
    local_queue = lookup(LOCAL_QUEUES, str(queue), str(namespace))
    if local_queue is None:
        return None
    cq_name = (local_queue.get("spec") or {}).get("clusterQueue")
    if not cq_name:
        return None
    cluster_queue = lookup(CLUSTER_QUEUES, str(cq_name), None)
    if cluster_queue is None:
        return None
    for name in _check_names(cluster_queue):
        check = lookup(ADMISSION_CHECKS, name, None)
        if check is not None and (check.get("spec") or {}).get("controllerName") == (
            MULTIKUEUE_CONTROLLER
        ):
            return str(cq_name)
    return None


def default_job(job: Obj, lookup: Lookup) -> Obj | None:
    """The Job as Kueue's webhook defaults it on CREATE, or None when nothing changes."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    spec = job.get("spec") or {}
    suspend = bool(labels.get(QUEUE_NAME_LABEL)) and spec.get("suspend") is not True
    managed_by = spec.get("managedBy")
    can_default = managed_by in (None, "", BUILTIN_JOB_CONTROLLER)
    set_managed_by = can_default and multikueue_cluster_queue(job, lookup) is not None
    if not suspend and not set_managed_by:
        return None
    changed = copy.deepcopy(job)
    new_spec = changed.setdefault("spec", {})
    if suspend:
        new_spec["suspend"] = True
    if set_managed_by:
        new_spec["managedBy"] = MULTIKUEUE_MANAGED_BY
    return changed


def kueue_job_webhook(lookup: Lookup) -> MutatingHook:
    """Kueue's ``mjob.kb.io`` as a mutating hook on ``CREATE`` of ``batch/v1`` Jobs.

    ``lookup`` reads the cluster's stored objects; :func:`store_lookup` builds one from a fake
    server's store.
    """

    def mutate(request: AdmissionRequest) -> Obj | None:
        if request.object is None:
            return None
        return default_job(request.object, lookup)

    return MutatingHook(
        name=JOB_WEBHOOK_NAME,
        match=Match(
            groups=(JOBS.group,),
            versions=(JOBS.version,),
            resources=(JOBS.plural,),
            operations=("CREATE",),
        ),
        fn=mutate,
    )
