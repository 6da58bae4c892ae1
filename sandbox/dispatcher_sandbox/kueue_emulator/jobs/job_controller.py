"""Kueue's batch/Job integration, emulated: Jobs as the entry point of MultiKueue work.

Mirrors Kueue v0.19.2 ``pkg/controller/jobs/job/job_controller.go`` (the Job reconciler,
:class:`JobReconciler`: Workload creation, start/stop, eviction release) with the generic
``pkg/controller/jobframework/reconciler.go``; the MultiKueue hooks (:class:`.JobAdapter`,
:func:`.remote_job_for`) are in :mod:`.job_multikueue_adapter`, the webhook in
:mod:`.job_webhook`.

This reproduces, over the API only, what Kueue v0.19's ``batch/job`` integration does
(``kubernetes-sigs/kueue: pkg/controller/jobs/job/``, the generic reconciler of
``pkg/controller/jobframework/reconciler.go`` and the MultiKueue adapter
``job_multikueue_adapter.go``), plus the few things the Kubernetes Job controller would do to a
Job's status, since the fake clusters run no pods.

**Manager and workers alike** (Kueue runs the same Job reconciler everywhere):

* A Job with the label ``kueue.x-k8s.io/queue-name`` gets one Workload, owned by the Job
  (``ownerReferences`` with ``controller: true``), named by :func:`workload_name_for_job`
  (Kueue's ``GetWorkloadNameForOwnerWithGVK``: ``job-<name>-<5 hex of sha1>``), finalizer
  ``kueue.x-k8s.io/resource-in-use``, label ``kueue.x-k8s.io/job-uid``, one pod set ``main``
  from the Job template with ``count = min(parallelism, completions)``, ``spec.queueName`` from
  the label, ``priorityClassRef``/``priority`` from the ``kueue.x-k8s.io/priority-class``
  WorkloadPriorityClass label. A Job that is not suspended is suspended first (Kueue's webhook
  and reconciler keep queued Jobs suspended until admission).
* A Job with the label ``kueue.x-k8s.io/prebuilt-workload-name`` uses that Workload instead (no
  new one): the Job becomes its controller owner, and a Workload whose pod sets do not match the
  Job is finished with reason ``OutOfSync`` (C25's exception).
* When the Workload is ``Admitted`` the Job is unsuspended, with the node labels and
  tolerations of the assigned ResourceFlavors merged into the pod template (``RunWithPodSetsInfo``);
  when it loses admission (eviction, C37) the Job is suspended again and the template restored;
  after an eviction the Workload's quota is given back (``QuotaReserved=False``) only once the
  Job has no active pods (issue 14 item 6; on the manager ``status.active`` is the worker's,
  copied by MultiKueue).
  This includes the manager's Job once its Workload is admitted (MultiKueue check ``Ready``), as
  upstream: its ``spec.managedBy`` keeps the Job controller away, so it never runs there, and
  MultiKueue only mirrors the worker's status onto an unsuspended manager Job.
* When the Job finishes (``Complete``/``Failed``), the Workload gets ``Finished`` through a
  server-side apply of that one condition as ``kueue-job-controller-Finished`` (``UpdateStatus``).

**Job controller stand-in** (Jobs whose ``spec.managedBy`` is unset or the built-in controller,
that is the Jobs that would run pods on this cluster): when unsuspended they get ``startTime`` and
``active``; when the emulated core finishes their Workload (after the
``sandbox.multikueue-dispatcher.io/run-seconds`` annotation), they get ``succeeded``, the
``SuccessCriteriaMet`` and ``Complete`` conditions and ``completionTime`` (or ``Failed``). Jobs
managed by MultiKueue (``spec.managedBy: kueue.x-k8s.io/multikueue``, the manager's copy) never
run here: their status only comes from the worker (:meth:`.JobAdapter.sync_remote_job`).

**MultiKueue hooks** (manager, C28 step 2, C33, C25, C24): :meth:`.JobAdapter.sync_remote_job`
first checks that a Job of that name on the worker, if any, carries this manager's origin label
(Kueue's ``ValidateRemoteObjectOwnership``: a foreign Job is refused and the Workload is not
admitted), then creates the Job on the winning worker (a copy of the manager Job with
``kueue.x-k8s.io/prebuilt-workload-name`` and ``kueue.x-k8s.io/multikueue-origin``, without
``managedBy``, selector and controller-managed template labels), or, once it exists, mirrors its
``status`` onto the manager Job (as ``determineStatusUpdate``: not while the manager Job is
suspended and the remote one runs). :meth:`.JobAdapter.remove_remote_job` deletes it, only if it
carries the origin label (``DeleteRemoteObjectIfOwned``).

Differences from upstream, on purpose:

* Kubernetes' garbage collector is emulated for Workloads owned by a Job: when the Job is gone,
  the adapter removes the ``resource-in-use`` finalizer and deletes the Workload.
* The sandbox annotation ``sandbox.multikueue-dispatcher.io/run-seconds`` is copied from the Job
  to its Workload (upstream copies no annotations except ProvisioningRequest ones), so that the
  emulated core knows how long the Job "runs". Other annotations (such as
  ``multikueue-dispatcher.io/preferred-gpu-types``) stay on the Job, as upstream.
* A pod template ``priorityClassName`` is honoured only if the cluster serves
  ``scheduling.k8s.io/v1`` PriorityClasses (the fake does not): otherwise priority 0, logged.
* ``sync_remote_job`` unsuspends a still-suspended manager Job when the remote Job has already
  finished, closing a race the emulation's fast timings open (upstream the manager Job is
  unsuspended as soon as the manager Workload is admitted, long before).
* No partial admission, no elastic Jobs, no ``ShortWorkloadNames`` gate (off in v0.19).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from dispatcher.topology.runs import RUN_ANNOTATIONS, pods_refused
from dispatcher_sandbox.kube_client import (
    JOBS,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    KubeError,
    Resource,
)
from dispatcher_sandbox.kueue_emulator.core import release_after_eviction
from dispatcher_sandbox.kueue_emulator.runtime import (
    KUEUE_MANAGER,
    PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL,
    Clock,
    ClusterConnection,
    Controller,
    KueueConfig,
    Obj,
    condition,
    is_true,
    timestamp,
    write_admission_status,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]

JOB_GROUP, JOB_VERSION, JOB_KIND = "batch", "v1", "Job"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOAD_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
BUILTIN_JOB_CONTROLLER = "kubernetes.io/job-controller"
# Kueue's constants.JobControllerName: UpdateStatus applies as "<this>-<condition type>".
JOB_CONTROLLER_NAME = "kueue-job-controller"
# The Kubernetes Job controller's field manager (for the status it would write).
KUBE_JOB_CONTROLLER = "kube-controller-manager"
DEFAULT_POD_SET = "main"  # kueue.DefaultPodSetName
OUT_OF_SYNC_MESSAGE = "The prebuilt workload is out of sync with its user job"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)

_HASH_LENGTH = 5
_MAX_WORKLOAD_NAME = 253  # 63 with the ShortWorkloadNames gate (alpha, off in v0.19)


# --- naming ------------------------------------------------------------------------------------


def workload_name_for_owner(
    owner_name: str,
    owner_uid: str,
    group: str,
    kind: str,
    *,
    max_length: int = _MAX_WORKLOAD_NAME,
) -> str:
    """Kueue's ``GetWorkloadNameForOwnerWithGVK`` (``jobframework/workload_names.go``).

    ``lower(kind)-owner`` truncated to ``max_length - 6`` characters, ``-``, then the first 5 hex
    digits of ``sha1(kind "\\n" group "\\n" owner name "\\n" owner uid)`` (the hash is taken over
    the full name). Upstream's test vector: Job ``name``, uid ``uid`` → ``job-name-ef3a1``.
    """
    digest = hashlib.sha1(  # a name suffix, as upstream; usedforsecurity=False
        "\n".join((kind, group, owner_name, owner_uid)).encode(), usedforsecurity=False
    ).hexdigest()
    prefix = f"{kind.lower()}-{owner_name}"[: max_length - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def workload_name_for_job(name: str, uid: str) -> str:
    """The Workload name Kueue gives a ``batch/v1`` Job (``GetWorkloadNameForJob``)."""
    return workload_name_for_owner(name, uid, JOB_GROUP, JOB_KIND)


# --- Job → Workload ----------------------------------------------------------------------------


def _job_spec(job: Mapping[str, Any]) -> Obj:
    spec: Obj = job.get("spec") or {}
    return spec


def _pods_count(job: Mapping[str, Any]) -> int:
    """``podsCount``: parallelism (defaulted to 1), at most ``completions``."""
    spec = _job_spec(job)
    parallelism = spec.get("parallelism")
    count = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    if completions is not None and int(completions) < count:
        count = int(completions)
    return count


def job_pod_sets(job: Mapping[str, Any]) -> list[Obj]:
    """The Workload pod sets of a Job: one set ``main`` (``Job.PodSets``)."""
    template = copy.deepcopy(_job_spec(job).get("template") or {})
    pod_set: Obj = {"name": DEFAULT_POD_SET, "count": _pods_count(job), "template": template}
    min_parallelism = (job.get("metadata", {}).get("annotations") or {}).get(
        "kueue.x-k8s.io/job-min-parallelism"
    )
    if min_parallelism and min_parallelism.isdigit():
        pod_set["minCount"] = int(min_parallelism)
    return [pod_set]


def _owner_reference(job: Mapping[str, Any]) -> Obj:
    meta = job["metadata"]
    return {
        "apiVersion": f"{JOB_GROUP}/{JOB_VERSION}",
        "kind": JOB_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload_for_job(
    job: Mapping[str, Any], *, priority: int = 0, priority_class_ref: Obj | None = None
) -> Obj:
    """The Workload Kueue creates for a Job (``constructWorkload`` + ``NewWorkload``)."""
    meta = job["metadata"]
    labels = meta.get("labels") or {}
    wl_meta: Obj = {
        "name": workload_name_for_job(meta["name"], meta["uid"]),
        "namespace": meta["namespace"],
        "labels": {JOB_UID_LABEL: meta["uid"]},
        "finalizers": [RESOURCE_IN_USE_FINALIZER],
        "ownerReferences": [_owner_reference(job)],
    }
    # The sandbox's run annotations (dispatcher.topology.runs), for the emulated worker that
    # finishes the Workload; real Kueue copies no Job annotation.
    job_annotations = meta.get("annotations") or {}
    run = {k: job_annotations[k] for k in RUN_ANNOTATIONS if job_annotations.get(k) is not None}
    if run:
        wl_meta["annotations"] = run
    spec: Obj = {
        "queueName": labels.get(QUEUE_NAME_LABEL, ""),
        "podSets": job_pod_sets(job),
        "priority": priority,
    }
    if priority_class_ref is not None:
        spec["priorityClassRef"] = priority_class_ref
    max_exec = labels.get(MAX_EXEC_TIME_LABEL, "")
    if max_exec.isdigit() and int(max_exec) > 0:
        spec["maximumExecutionTimeSeconds"] = int(max_exec)
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": wl_meta,
        "spec": spec,
    }


# --- small predicates --------------------------------------------------------------------------


def _job_finished(job: Mapping[str, Any]) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the Job's ``Complete``/``Failed`` conditions."""
    if is_true(job, "Complete"):
        return True, True, ""
    if is_true(job, "Failed"):
        failed = condition(job.get("status"), "Failed") or {}
        return True, False, str(failed.get("message") or "")
    return False, False, ""


def _suspended(job: Mapping[str, Any]) -> bool:
    return bool(_job_spec(job).get("suspend"))


def _job_active(job: Mapping[str, Any]) -> bool:
    """Kueue's ``Job.IsActive``: the Job has active pods (``status.active != 0``)."""
    return int((job.get("status") or {}).get("active") or 0) != 0


def _runs_here(job: Mapping[str, Any]) -> bool:
    """Whether the built-in Job controller (and so "pods") acts on this Job on its cluster."""
    return _job_spec(job).get("managedBy") in (None, "", BUILTIN_JOB_CONTROLLER)


def _controller_ref(obj: Mapping[str, Any]) -> Obj | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            found: Obj = ref
            return found
    return None


def _requests_by_container(template: Mapping[str, Any]) -> dict[str, Any]:
    spec = template.get("spec") or {}
    out: dict[str, Any] = {}
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            resources = container.get("resources") or {}
            out[f"{group}/{container.get('name')}"] = resources.get("requests") or {}
    return out


def _pod_sets_equivalent(job_sets: list[Obj], wl_sets: list[Obj]) -> bool:
    """A lenient ``EquivalentToWorkload``: names, counts and container requests."""
    if len(job_sets) != len(wl_sets):
        return False
    for mine, theirs in zip(job_sets, wl_sets, strict=True):
        if mine.get("name") != theirs.get("name"):
            return False
        if int(mine.get("count", 1)) != int(theirs.get("count", 1)):
            return False
        if _requests_by_container(mine.get("template") or {}) != _requests_by_container(
            theirs.get("template") or {}
        ):
            return False
    return True


def _workload_ready_to_run(wl: Mapping[str, Any]) -> bool:
    return is_true(wl, "Admitted") and not is_true(wl, "Finished") and not is_true(wl, "Evicted")


# --- the controller ----------------------------------------------------------------------------


class JobReconciler(Controller):
    """Kueue's Job reconciler (and the Job controller's status) on one cluster.

    ``role`` is ``"manager"`` or ``"worker"``; the reconciler is the same, except that on a
    worker a MultiKueue Job (origin label) whose Workload copy was deleted is deleted too. Create
    the connection with (at least) :attr:`RESOURCES` (the constructor adds them when missing, so
    build the adapter before ``conn.run()`` starts), then run ``conn.run()`` and :meth:`run`.
    On the manager, use :class:`.JobAdapter` (this reconciler plus the MultiKueue hooks).

    A pass reconciles the Jobs that changed since the last one, as Kueue's reconciler is keyed
    by Job: a Job's event names it, a Workload's event names its controller Job and the Jobs
    that look it up by name (the prebuilt label, the derived name), a Job's deletion names the
    Workloads it owned for the garbage collection; a re-list, a ResourceFlavor or a
    WorkloadPriorityClass change (read when a Job starts or gets its Workload) names them all.
    A Job whose step asks to be looked at again (a conflict, a missing priority class) is
    requeued alone. ``jobs_reconciled`` and ``workloads_collected`` count the work.
    """

    name = "job-adapter"
    RESOURCES: tuple[Resource, ...] = (JOBS, WORKLOADS, RESOURCE_FLAVORS, WORKLOAD_PRIORITY_CLASSES)

    def __init__(
        self, conn: ClusterConnection, config: KueueConfig, clock: Clock, *, role: str
    ) -> None:
        if role not in ("manager", "worker"):
            raise ValueError(f'role must be "manager" or "worker", not {role!r}')
        super().__init__(config, clock)
        self.conn = conn
        self.role = role
        self.name = f"job-adapter[{conn.name}]"
        # What the next pass looks at: the Jobs and Workloads an event named (Kueue's Job
        # reconciler is keyed by Job, its watch of Workloads maps each to its owner Job), or
        # everything (the first pass, a re-list, a flavor or priority class change).
        self._everything = True
        self._dirty_jobs: set[Key] = set()
        self._dirty_workloads: set[Key] = set()
        # Indexes kept from the events, so that a Workload event finds its Job and a Job's
        # deletion the Workloads it owned without a pass over every object.
        self._job_uid: dict[Key, str] = {}  # Job key → uid
        self._live_uids: set[Key] = set()  # (namespace, uid) of every cached Job
        self._looked_up_as: dict[Key, Key] = {}  # Job key → the Workload name it is found by
        self._jobs_by_name: dict[Key, set[Key]] = {}  # that Workload key → Job keys
        self._owner: dict[Key, Key] = {}  # Workload key → (namespace, controller Job uid)
        self._owned: dict[Key, set[Key]] = {}  # (namespace, Job uid) → Workload keys
        self.jobs_reconciled = 0
        """Jobs reconciled so far (one per dirty Job per pass), for operation-count tests."""
        self.workloads_collected = 0
        """Workloads the garbage-collection step looked at so far."""
        for resource in self.RESOURCES:
            conn.add_resource(resource)
        conn.subscribe(self._changed)

    def _changed(self, resource: Resource, kind: str, obj: Obj) -> None:
        if resource not in self.RESOURCES:
            return
        if not obj or resource not in (JOBS, WORKLOADS):
            self._everything = True  # SYNCED/DISCONNECTED, flavors, priority classes
        elif resource == JOBS:
            self._job_changed(kind, obj)
        else:
            self._workload_changed(kind, obj)
        self.mark_dirty()

    def _job_changed(self, kind: str, job: Obj) -> None:
        meta = job["metadata"]
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self._dirty_jobs.add(key)
        old_uid = self._job_uid.pop(key, None)
        if old_uid is not None:
            self._live_uids.discard((key[0], old_uid))
            if kind == "DELETED" or old_uid != meta.get("uid"):
                # Its Workloads lost their owner: the garbage collection looks at them.
                self._dirty_workloads.update(self._owned.get((key[0], old_uid), ()))
        old_name = self._looked_up_as.pop(key, None)
        if old_name is not None:
            self._forget(self._jobs_by_name, old_name, key)
        if kind == "DELETED":
            return
        uid = str(meta.get("uid", ""))
        self._job_uid[key] = uid
        self._live_uids.add((key[0], uid))
        prebuilt = (meta.get("labels") or {}).get(PREBUILT_WORKLOAD_LABEL)
        name = (key[0], prebuilt or workload_name_for_job(key[1], uid))
        self._looked_up_as[key] = name
        self._jobs_by_name.setdefault(name, set()).add(key)

    def _workload_changed(self, kind: str, wl: Obj) -> None:
        meta = wl["metadata"]
        key = (meta.get("namespace", ""), meta.get("name", ""))
        self._dirty_workloads.add(key)
        self._dirty_jobs.update(self._jobs_by_name.get(key, ()))
        old_owner = self._owner.pop(key, None)
        if old_owner is not None:
            self._forget(self._owned, old_owner, key)
        ref = _controller_ref(wl)
        if ref is None or ref.get("kind") != JOB_KIND:
            return
        self._dirty_jobs.add((key[0], str(ref.get("name", ""))))
        if kind != "DELETED":
            owner = (key[0], str(ref.get("uid", "")))
            self._owner[key] = owner
            self._owned.setdefault(owner, set()).add(key)

    @staticmethod
    def _forget(index: dict[Key, set[Key]], at: Key, key: Key) -> None:
        keys = index.get(at)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del index[at]

    @property
    def client(self) -> KubeClient:
        """The client of this adapter's cluster."""
        return self.conn.client

    def _synced(self) -> bool:
        return all(self.conn.cache(r).synced.is_set() for r in self.RESOURCES)

    # --- reconcile -----------------------------------------------------------------------------

    async def reconcile(self) -> float | None:
        """One pass over the Jobs and Workloads changed since the last (every one on the first
        pass and after a re-list): each Job's step, then the garbage collection of the changed
        Workloads whose Job is gone. A Job that asks to be looked at again is requeued alone."""
        if not self._synced():
            return 0.05
        jobs = self.conn.cache(JOBS).objects
        # The cached objects themselves (read-only): every path below only reads them and
        # builds new patch bodies (job_pod_sets copies the template it takes, _with_condition
        # copies the conditions it changes, _complete_job rebinds ``job`` to a new dict).
        workloads = self.conn.cache(WORKLOADS).objects
        if self._everything:
            self._everything = False
            self._dirty_jobs.update(jobs)
            self._dirty_workloads.update(workloads)
        # Each list is worked off from its end (in key order); a pass that fails (it is retried
        # with backoff) leaves what it had not done, the failed key included, for the next.
        todo = sorted(self._dirty_jobs, reverse=True)
        self._dirty_jobs.clear()
        try:
            while todo:
                await self._job_step(todo[-1], jobs, workloads)
                todo.pop()
        finally:
            self._dirty_jobs.update(todo)
        todo = sorted(self._dirty_workloads, reverse=True)
        self._dirty_workloads.clear()
        try:
            while todo:
                wl = workloads.get(todo[-1])
                if wl is not None:
                    self.workloads_collected += 1
                    await self._collect_garbage(wl, self._live_uids)
                todo.pop()
        finally:
            self._dirty_workloads.update(todo)
        return None

    async def _job_step(
        self, key: Key, jobs: Mapping[Key, Obj], workloads: Mapping[Key, Obj]
    ) -> None:
        """One Job's reconcile, requeued alone when it asks to be looked at again."""
        job = jobs.get(key)
        if job is None:
            return  # deleted: the garbage collection sees to its Workloads
        self.jobs_reconciled += 1
        uid = job["metadata"]["uid"]
        owned = {}
        found = sorted(self._owned.get((key[0], uid), ()))
        if found:
            owned[(key[0], uid)] = workloads[found[-1]]
        try:
            again = await self._reconcile_job(job, workloads, owned)
        except KubeError as error:
            if error.status not in (404, 409):
                raise
            again = 0.05  # a concurrent change: look again soon
        if again is not None:  # controller-runtime's RequeueAfter, for this Job alone
            self._schedule(again, functools.partial(self._dirty_jobs.add, key))

    async def _reconcile_job(
        self,
        job: Obj,
        workloads: Mapping[tuple[str, str], Obj],
        owned: Mapping[tuple[str, str], Obj],
    ) -> float | None:
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        namespace = meta["namespace"]
        prebuilt = labels.get(PREBUILT_WORKLOAD_LABEL)
        if (not prebuilt and not labels.get(QUEUE_NAME_LABEL)) or meta.get("deletionTimestamp"):
            return None  # manageJobsWithoutQueueName is false: not Kueue's
        if prebuilt:
            wl = workloads.get((namespace, prebuilt))
            if wl is None:
                return await self._prebuilt_missing(job, prebuilt)
            if not await self._ensure_ownership(job, wl):
                return None
        else:
            wl = owned.get((namespace, meta["uid"]))
            if wl is None:
                wl = workloads.get((namespace, workload_name_for_job(meta["name"], meta["uid"])))
            if wl is None:
                return await self._create_workload(job)
        finished, succeeded, message = _job_finished(job)
        if finished:
            if not is_true(wl, "Finished"):
                await self._finish_workload(
                    wl,
                    "Succeeded" if succeeded else "Failed",
                    "Job finished successfully" if succeeded else message or "Job failed",
                )
            return None
        if is_true(wl, "Finished"):
            finished_cond = condition(wl.get("status"), "Finished") or {}
            if _runs_here(job) and finished_cond.get("reason") != "OutOfSync":
                await self._complete_job(job, wl, finished_cond)
            return None
        if prebuilt and not _pod_sets_equivalent(
            job_pod_sets(job), (wl.get("spec") or {}).get("podSets") or []
        ):
            await self._finish_workload(wl, "OutOfSync", OUT_OF_SYNC_MESSAGE)
            return None
        if is_true(wl, "Evicted"):
            await self._evicted(job, wl)
            return None
        if _workload_ready_to_run(wl):
            if _suspended(job):
                await self._start_job(job, wl)
                return None
        elif not _suspended(job):
            await self._stop_job(job, wl)
            return None
        await self._job_controller(job)
        return None

    async def _evicted(self, job: Obj, wl: Obj) -> None:
        """The reconciler's eviction step (C13, C37; issue 14 item 6): stop the Job, then give
        the Workload's quota back only once the Job has no active pods.

        As ``pkg/controller/jobframework/reconciler.go`` does: ``stopJob`` first; the
        reservation is cleared (:func:`.core.release_after_eviction`) only while the Workload
        still holds it and ``IsActive()`` (``status.active != 0``) is false. On a worker the
        Job controller stand-in zeroes ``active`` after the suspension; on the manager the
        Job's status is MultiKueue's copy of the worker's, so the manager's quota comes back
        only after the worker Job's pods are gone. One write per pass: the next change of the
        Job or the Workload brings the next step.
        """
        if not _suspended(job):
            await self._stop_job(job, wl)
            return
        if is_true(wl, "QuotaReserved") and not _job_active(job):
            status = release_after_eviction(
                copy.deepcopy(dict(wl.get("status") or {})),
                self.clock,
                observability=self.config.unadmitted_workloads_observability,
            )
            await write_admission_status(self.client, wl, status, self.config, strict=True)
            return
        await self._job_controller(job)

    # --- workloads -----------------------------------------------------------------------------

    async def _priority(self, job: Obj) -> tuple[int, Obj | None] | None:
        """(priority, priorityClassRef) as ``prepareWorkloadPriority``; None: retry later."""
        labels = job["metadata"].get("labels") or {}
        wpc_name = labels.get(WORKLOAD_PRIORITY_CLASS_LABEL)
        if wpc_name:
            wpc = self.conn.cache(WORKLOAD_PRIORITY_CLASSES).get(wpc_name)
            if wpc is None:
                log.warning(
                    "%s: Job %s/%s: WorkloadPriorityClass %r not found",
                    self.name,
                    job["metadata"]["namespace"],
                    job["metadata"]["name"],
                    wpc_name,
                )
                return None
            ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": wpc_name}
            return int(wpc.get("value", 0)), ref
        pc_name = ((_job_spec(job).get("template") or {}).get("spec") or {}).get(
            "priorityClassName"
        )
        if pc_name:
            try:
                pc = await self.client.get(PRIORITY_CLASSES, pc_name)
            except KubeError:
                pc = None
            if pc is not None:
                ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc_name}
                return int(pc.get("value", 0)), ref
            log.warning("%s: PriorityClass %r is not served here; priority 0", self.name, pc_name)
        return 0, None

    async def _create_workload(self, job: Obj) -> float | None:
        if not _suspended(job):
            # Kueue keeps a queued Job suspended until its Workload is admitted.
            await self._patch_job_spec(job, {"suspend": True})
        priority = await self._priority(job)
        if priority is None:
            return 1.0
        body = workload_for_job(job, priority=priority[0], priority_class_ref=priority[1])
        try:
            await self.client.create(WORKLOADS, body)
        except KubeError as error:
            if error.status != 409:
                raise
        return None

    async def _finish_workload(self, wl: Obj, reason: str, message: str) -> None:
        """``workload.UpdateStatus(Finished=True)``: apply of one condition, own field manager."""
        meta = wl["metadata"]
        body = {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "status": {
                "conditions": [
                    {
                        "type": "Finished",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": timestamp(self.clock),
                        "observedGeneration": meta.get("generation", 1),
                    }
                ]
            },
        }
        await self.client.apply(
            WORKLOADS,
            body,
            subresource="status",
            field_manager=f"{JOB_CONTROLLER_NAME}-Finished",
            force=False,
        )

    async def _ensure_ownership(self, job: Obj, wl: Obj) -> bool:
        """``ensurePrebuiltWorkloadOwnership``: the Job becomes the Workload's controller."""
        ref = _controller_ref(wl)
        uid = job["metadata"]["uid"]
        if ref is not None:
            if ref.get("uid") == uid:
                return True
            log.warning(
                "%s: prebuilt Workload %s/%s is controlled by another object",
                self.name,
                wl["metadata"]["namespace"],
                wl["metadata"]["name"],
            )
            return False
        refs = [*(wl["metadata"].get("ownerReferences") or []), _owner_reference(job)]
        await self.client.merge_patch(
            WORKLOADS,
            wl["metadata"]["name"],
            {
                "metadata": {
                    "ownerReferences": refs,
                    "resourceVersion": wl["metadata"]["resourceVersion"],
                }
            },
            namespace=wl["metadata"]["namespace"],
            field_manager=KUEUE_MANAGER,
        )
        return True

    async def _prebuilt_missing(self, job: Obj, name: str) -> float | None:
        """The prebuilt Workload does not exist (yet, or any more): ``handleJobWithNoWorkload``
        stops the Job and keeps it (Kueue logs "prebuilt workload not found" and retries), a
        MultiKueue Job on a worker as any other; only MultiKueue's explicit removal of a copy's
        remote objects (C24, C41) deletes such a Job (C68: a leftover stays)."""
        if not _suspended(job):
            await self._patch_job_spec(job, {"suspend": True})
        else:
            await self._job_controller(job)
        return None

    async def _collect_garbage(self, wl: Obj, live_uids: set[tuple[str, str]]) -> None:
        """The garbage collector and Kueue's finalizer removal for Job-owned Workloads."""
        ref = _controller_ref(wl)
        if ref is None or ref.get("kind") != JOB_KIND:
            return
        meta = wl["metadata"]
        namespace = meta["namespace"]
        if (namespace, ref.get("uid", "")) in live_uids and not meta.get("deletionTimestamp"):
            return
        if not meta.get("deletionTimestamp"):
            live = await self.client.get(JOBS, ref.get("name", ""), namespace)
            if live is not None and live["metadata"].get("uid") == ref.get("uid"):
                return  # the cache is behind
        try:
            if RESOURCE_IN_USE_FINALIZER in (meta.get("finalizers") or []):
                await self.client.merge_patch(
                    WORKLOADS,
                    meta["name"],
                    {
                        "metadata": {
                            "finalizers": [
                                f for f in meta["finalizers"] if f != RESOURCE_IN_USE_FINALIZER
                            ],
                            "resourceVersion": meta["resourceVersion"],
                        }
                    },
                    namespace=namespace,
                    field_manager=KUEUE_MANAGER,
                )
            if not meta.get("deletionTimestamp"):
                await self.client.delete(WORKLOADS, meta["name"], namespace)
        except KubeError as error:
            if error.status not in (404, 409):
                raise
            self._dirty_workloads.add((namespace, meta["name"]))
            self.mark_dirty()

    # --- jobs ----------------------------------------------------------------------------------

    async def _patch_job_spec(self, job: Obj, spec: Obj) -> None:
        meta = job["metadata"]
        await self.client.merge_patch(
            JOBS,
            meta["name"],
            {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": spec},
            namespace=meta["namespace"],
            field_manager=KUEUE_MANAGER,
        )

    async def _patch_job_status(self, job: Obj, status: Obj, manager: str) -> None:
        meta = job["metadata"]
        await self.client.merge_patch(
            JOBS,
            meta["name"],
            {"status": status},
            namespace=meta["namespace"],
            subresource="status",
            field_manager=manager,
        )

    def _pod_set_info(self, wl: Obj) -> tuple[dict[str, str], list[Obj]]:
        """Node labels and tolerations of the flavors assigned to pod set ``main``."""
        node_labels: dict[str, str] = {}
        tolerations: list[Obj] = []
        admission = (wl.get("status") or {}).get("admission") or {}
        for assignment in admission.get("podSetAssignments") or []:
            if assignment.get("name") != DEFAULT_POD_SET:
                continue
            for flavor_name in sorted(set((assignment.get("flavors") or {}).values())):
                flavor = self.conn.cache(RESOURCE_FLAVORS).get(flavor_name)
                if flavor is None:
                    continue
                spec = flavor.get("spec") or {}
                node_labels.update(spec.get("nodeLabels") or {})
                for toleration in spec.get("tolerations") or []:
                    if toleration not in tolerations:
                        tolerations.append(toleration)
        return node_labels, tolerations

    async def _start_job(self, job: Obj, wl: Obj) -> None:
        """``StartJob``: unsuspend with the admitted flavors' node labels and tolerations."""
        node_labels, tolerations = self._pod_set_info(wl)
        pod_spec = (_job_spec(job).get("template") or {}).get("spec") or {}
        spec: Obj = {"suspend": False}
        template_spec: Obj = {}
        if node_labels:
            template_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_labels}
        if tolerations:
            current = list(pod_spec.get("tolerations") or [])
            template_spec["tolerations"] = current + [t for t in tolerations if t not in current]
        if template_spec:
            spec["template"] = {"spec": template_spec}
        await self._patch_job_spec(job, spec)

    async def _stop_job(self, job: Obj, wl: Obj) -> None:
        """``StopJob``: suspend, reset ``status.startTime`` and restore the template's node
        selector and tolerations (Kueue's ``Job.Stop``; its three writes are two here)."""
        original: Obj = {}
        for pod_set in (wl.get("spec") or {}).get("podSets") or []:
            if pod_set.get("name") == DEFAULT_POD_SET:
                original = (pod_set.get("template") or {}).get("spec") or {}
        pod_spec = (_job_spec(job).get("template") or {}).get("spec") or {}
        wanted = original.get("nodeSelector") or {}
        # A merge patch merges maps: name every injected key to remove it.
        selector: Obj = {k: None for k in pod_spec.get("nodeSelector") or {} if k not in wanted}
        selector.update(wanted)
        template_spec: Obj = {"tolerations": original.get("tolerations")}
        if selector:
            template_spec["nodeSelector"] = selector
        await self._patch_job_spec(job, {"suspend": True, "template": {"spec": template_spec}})
        if (job.get("status") or {}).get("startTime"):
            await self._patch_job_status(job, {"startTime": None}, KUEUE_MANAGER)

    def _with_condition(
        self, job: Obj, kind: str, value: str, reason: str, message: str
    ) -> list[Obj]:
        conditions = [dict(c) for c in (job.get("status") or {}).get("conditions") or []]
        now = timestamp(self.clock)
        for item in conditions:
            if item.get("type") == kind:
                if item.get("status") != value:
                    item["lastTransitionTime"] = now
                item.update({"status": value, "reason": reason, "message": message})
                item["lastProbeTime"] = now
                return conditions
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
        )
        return conditions

    async def _job_controller(self, job: Obj) -> None:
        """The Job controller's status for a Job that runs here, from ``spec.suspend``.

        Suspended: condition ``Suspended=True`` (``JobSuspended``), no active pods, no
        ``startTime``. Running: ``startTime``, ``active`` pods and, after a suspension,
        ``Suspended=False`` (``JobResumed``). Level-triggered: written only when it differs.
        """
        if not _runs_here(job) or _job_finished(job)[0]:
            return
        status = job.get("status") or {}
        suspended = condition(status, "Suspended")
        patch: Obj
        if _suspended(job):
            if (
                suspended is not None
                and suspended.get("status") == "True"
                and not status.get("startTime")
                and not status.get("active")
            ):
                return
            patch = {"active": 0, "ready": 0, "startTime": None}
            patch["conditions"] = self._with_condition(
                job, "Suspended", "True", "JobSuspended", "Job suspended"
            )
        else:
            if status.get("startTime") and (suspended is None or suspended.get("status") != "True"):
                return
            # Pods naming a ServiceAccount the test world never creates are refused: none run
            # (dispatcher.topology.runs.pods_refused).
            count = 0 if pods_refused(job) else _pods_count(job)
            patch = {
                "startTime": status.get("startTime") or timestamp(self.clock),
                "active": count,
                "ready": count,
                "terminating": 0,
                "uncountedTerminatedPods": {},
            }
            if suspended is not None:
                patch["conditions"] = self._with_condition(
                    job, "Suspended", "False", "JobResumed", "Job resumed"
                )
        await self._patch_job_status(job, patch, KUBE_JOB_CONTROLLER)

    async def _complete_job(self, job: Obj, wl: Obj, finished: Mapping[str, Any]) -> None:
        """The pods "ran": the Job controller completes (or fails) the Job."""
        if _suspended(job):
            await self._start_job(job, wl)
        now = timestamp(self.clock)
        status = job.get("status") or {}
        patch: Obj = {"active": 0, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}
        if not status.get("startTime"):
            patch["startTime"] = now
        if finished.get("reason") == "Failed":
            conditions = self._with_condition(
                job,
                "FailureTarget",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            job = {**job, "status": {**status, "conditions": conditions}}
            conditions = self._with_condition(
                job,
                "Failed",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            patch.update(
                {"failed": max(1, int(status.get("failed") or 0)), "conditions": conditions}
            )
        else:
            spec = _job_spec(job)
            succeeded = int(spec.get("completions") or _pods_count(job))
            message = "Reached expected number of succeeded pods"
            conditions = self._with_condition(
                job, "SuccessCriteriaMet", "True", "CompletionsReached", message
            )
            job = {**job, "status": {**status, "conditions": conditions}}
            conditions = self._with_condition(
                job, "Complete", "True", "CompletionsReached", message
            )
            patch.update({"succeeded": succeeded, "completionTime": now, "conditions": conditions})
        await self._patch_job_status(job, patch, KUBE_JOB_CONTROLLER)
