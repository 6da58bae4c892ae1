"""The MultiKueue adapter of the batch/Job integration (manager side; C24, C25, C28 step 2, C33).

Mirrors Kueue v0.19.2 ``pkg/controller/jobs/job/job_multikueue_adapter.go``
(``multiKueueAdapter``: ``SyncJob`` with ``ValidateRemoteObjectOwnership``, the status copy,
``DeleteRemoteObject``, ``WorkloadKeysFor``). :class:`JobAdapter` is the Job reconciler of
:mod:`.job_controller` plus these hooks, which the MultiKueue workload controller calls.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from dispatcher_sandbox.kube_client import (
    JOBS,
    KubeClient,
    KubeError,
)
from dispatcher_sandbox.kueue_emulator.jobs.job_controller import (
    JOB_GROUP,
    JOB_KIND,
    JOB_VERSION,
    JobReconciler,
    _controller_ref,
    _job_finished,
    _job_spec,
    _suspended,
)
from dispatcher_sandbox.kueue_emulator.runtime import (
    KUEUE_MANAGER,
    ORIGIN_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    Obj,
    RemoteObjectNotOwned,
    get_metadata,
    is_true,
)

log = logging.getLogger(__name__)

# Labels the API server puts on a Job's template; the MultiKueue adapter drops them (ManagedLabels).
MANAGED_TEMPLATE_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


def remote_job_for(local_job: Mapping[str, Any], workload_name: str, origin: str) -> Obj:
    """The worker's copy of a manager Job (the MultiKueue adapter's ``SyncJob`` create path).

    Metadata as ``CloneObjectMetaForCreation`` (name, namespace, labels, annotations), the whole
    spec without ``selector``, ``managedBy`` and the controller-managed template labels, plus the
    prebuilt-workload and origin labels.
    """
    meta = local_job["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[PREBUILT_WORKLOAD_LABEL] = workload_name
    labels[ORIGIN_LABEL] = origin
    new_meta: Obj = {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}
    if meta.get("annotations"):
        new_meta["annotations"] = dict(meta["annotations"])
    spec = copy.deepcopy(_job_spec(local_job))
    spec.pop("selector", None)
    spec.pop("managedBy", None)
    template_labels = (spec.get("template") or {}).get("metadata", {}).get("labels")
    if isinstance(template_labels, dict):
        for key in MANAGED_TEMPLATE_LABELS:
            template_labels.pop(key, None)
    return {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
        "kind": JOB_KIND,
        "metadata": new_meta,
        "spec": spec,
    }


def workload_key_for(remote_job: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (namespace, name) of the Workload a worker's Job belongs to, from its prebuilt label.

    Kueue's ``MultiKueueWatcher.WorkloadKeyFor``: the manager watches Jobs on the workers too, so
    that a change of a remote Job's status reconciles (and so mirrors, C28) its Workload.
    """
    meta = remote_job.get("metadata") or {}
    name = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
    if not name:
        return None
    return (meta.get("namespace", ""), name)


class JobAdapter(JobReconciler):
    """:class:`~.job_controller.JobReconciler` with the MultiKueue adapter's hooks.

    On the manager, hand :meth:`sync_remote_job` and :meth:`remove_remote_job` to the
    MultiKueue controller.
    """

    async def sync_remote_job(
        self, worker_client: KubeClient, local_workload: Obj, cluster_name: str
    ) -> bool:
        """What Kueue's workload reconciler does with the Job adapter before it admits, finishes
        or re-syncs an evicted Workload (C28 step 2, C33; C25, C26): the remote-ownership check,
        then ``SyncJob``.

        * ``ValidateRemoteObjectOwnership`` (a metadata GET): a Job of the manager Job's name
          already on the worker without this manager's ``kueue.x-k8s.io/multikueue-origin``
          label (a user's own Job, another manager's) is not adopted:
          :class:`~.runtime.RemoteObjectNotOwned` is raised, the reconcile fails and is retried
          with backoff, so the Workload is never admitted while that Job is there (C33).
        * Absent: the Job is created (see :func:`remote_job_for`).
        * Present: its ``status`` is copied onto the manager Job (``determineStatusUpdate``)
          when the manager Job is unsuspended, when both are suspended (an eviction: the
          worker's ``active`` count reaches the manager), or when the remote Job finished;
          while the manager Job is suspended and the remote one runs, the manager Job only gets
          ``Suspended=True`` (reason ``MultiKueueAdapter``) once, as Kueue sets it for the
          Kubernetes 1.36 Job validation.

        Workloads not owned by a Job are left alone. Returns True when the status sync was
        deferred (the manager Job suspended, the remote one running), as ``SyncJob`` reports it.
        """
        ref = _controller_ref(local_workload)
        if ref is None or ref.get("kind") != JOB_KIND:
            return False
        namespace = local_workload["metadata"]["namespace"]
        name = str(ref.get("name", ""))
        existing = await get_metadata(worker_client, JOBS, name, namespace)
        if existing is not None:
            origin = ((existing.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL)
            if origin != self.config.origin:
                raise RemoteObjectNotOwned("Job", namespace, name, self.config.origin)
        local_job = await self.client.get(JOBS, name, namespace)
        if local_job is None:  # Kueue's SyncJob fails on the missing local Job: retried
            raise KubeError(404, {"message": f'jobs.batch "{name}" not found'}, "GET", "jobs")
        remote = await worker_client.get(JOBS, name, namespace)
        if remote is None:
            body = remote_job_for(local_job, local_workload["metadata"]["name"], self.config.origin)
            try:
                await worker_client.create(JOBS, body)
            except KubeError as error:
                if error.status != 409:
                    raise
            log.info("%s: created Job %s/%s on %s", self.name, namespace, name, cluster_name)
            return False
        finished = _job_finished(remote)[0]
        if _suspended(local_job) and not _suspended(remote) and not finished:
            if not is_true(local_job, "Suspended"):
                conditions = self._with_condition(
                    local_job, "Suspended", "True", "MultiKueueAdapter", "Set by MultiKueue adapter"
                )
                await self._patch_job_status(local_job, {"conditions": conditions}, KUEUE_MANAGER)
            return True  # upstream: the sync is deferred until the local Job is unsuspended
        if _suspended(local_job) and finished:
            await self._patch_job_spec(local_job, {"suspend": False})
        await self._mirror_status(local_job, remote.get("status") or {})
        return False

    async def _mirror_status(self, local_job: Obj, remote_status: Obj) -> None:
        """``localJob.Status = remoteJob.Status`` as one merge patch of ``/status`` (as
        ``kueue``; keys the remote status lacks are removed); nothing when they are equal."""
        current = local_job.get("status") or {}
        if current == remote_status:
            return
        patch: Obj = {key: None for key in current if key not in remote_status}
        patch.update(copy.deepcopy(remote_status))
        await self._patch_job_status(local_job, patch, KUEUE_MANAGER)

    async def remove_remote_job(
        self, worker_client: KubeClient, workload: Obj, cluster_name: str
    ) -> None:
        """Kueue's ``DeleteRemoteObjectIfOwned`` (C24, C32, C41): the worker's Job named by
        ``workload``'s controller owner (the manager Workload's Job, or, for the GC, the Job
        that adopted the copy) is deleted, with background propagation, only if it carries this
        manager's origin label; a foreign Job of that name is left alone."""
        ref = _controller_ref(workload)
        if ref is None or ref.get("kind") != JOB_KIND:
            return
        namespace = workload["metadata"]["namespace"]
        name = str(ref.get("name", ""))
        existing = await get_metadata(worker_client, JOBS, name, namespace)
        if existing is None:
            return
        origin = ((existing.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL)
        if origin != self.config.origin:
            log.info(
                "%s: not deleting Job %s/%s on %s: not created by this manager (origin %r)",
                self.name,
                namespace,
                name,
                cluster_name,
                origin,
            )
            return
        try:
            await worker_client.request(
                "DELETE", JOBS.path(namespace, name), query={"propagationPolicy": "Background"}
            )
        except KubeError as error:
            if error.status != 404:
                raise
            return
        log.info("%s: deleted Job %s/%s on %s", self.name, namespace, name, cluster_name)
